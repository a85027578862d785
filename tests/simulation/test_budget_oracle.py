"""The simulator's budget oracle (issue 14 item 1; ``adapters.simulation.budgets``): budgets are
exercised in ordinary seeds, and a planted budget bug is found as a ``call_budget`` violation:
windows that never fill, or lookups that take no call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from unittest import mock

import pytest

from adapters.simulation import run_seed
from adapters.simulation.shrink import shrink
from executors import outcomes
from ledger.budgets import CallWindow

SEEDS = 100
"""Seeds a planted budget bug must be found within."""


@contextmanager
def windows_never_fill() -> Iterator[None]:
    """A window always has calls left: the budget counts but never limits."""
    with mock.patch.object(CallWindow, "left", property(lambda self: 1_000_000)):
        yield


@contextmanager
def lookups_take_no_call() -> Iterator[None]:
    """A lookup after a lost response is sent without taking a call from any budget."""
    with mock.patch.object(outcomes, "budget_of", lambda *args, **kwargs: None):
        yield


PLANTED: dict[str, Callable[[], AbstractContextManager[None]]] = {
    "windows_never_fill": windows_never_fill, "lookups_take_no_call": lookups_take_no_call}


REGRESSION_SEEDS = {
    505166: "a claim whose budget was decided on the worker's stale copy (dispatching, so no budget) "
            "committed as a pending operation's send, unbudgeted: 7 requests in a global window of 6",
}


@pytest.mark.parametrize("seed", sorted(REGRESSION_SEEDS))
def test_seeds_that_found_budget_bugs_stay_clean(seed: int) -> None:
    assert run_seed(seed).violation is None, REGRESSION_SEEDS[seed]


def test_ordinary_seeds_use_up_budgets_and_wait() -> None:
    result = run_seed(1)
    assert result.violation is None
    assert sum("BudgetWaited" in line for line in result.trace) > 0


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_budget_bug_is_found(name: str) -> None:
    with PLANTED[name]():
        found = next((r for r in (run_seed(seed) for seed in range(SEEDS)) if r.violation), None)
        assert found is not None, f"{name} was not found within {SEEDS} seeds"
        assert found.violation is not None and found.violation.invariant == "call_budget", found.violation
        small = shrink(found)
    assert small.violation is not None and small.violation.invariant == "call_budget"
