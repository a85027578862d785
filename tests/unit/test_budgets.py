"""Call budget rules (issue 14 item 1): scopes, epoch-aligned windows and the guard before a
window's end. Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from executors.budgets import budget_of
from ledger.budgets import CallWindow, budget_scope, window_bounds, window_id
from ledger.declarations import Integration


def _declaration(**budgets: object) -> Integration:
    return Integration.parse({"name": "payments.refund", "version": 1, "adapter": "webhook",
                              "delivery_mode": "idempotent", "budgets": budgets})


def test_scopes_per_integration_and_per_tenant() -> None:
    assert budget_scope(_declaration(), "acme") is None
    assert budget_scope(_declaration(calls_per_window=5), "acme") == "payments.refund"
    assert budget_scope(_declaration(calls_per_window=5, scope="tenant"), "acme") == "payments.refund|tenant=acme"


@pytest.mark.parametrize(("at", "start"), [
    (datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)),
    (datetime(2026, 1, 1, 0, 0, 1, 999999, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)),
    (datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC)),
])
def test_windows_are_aligned_to_the_epoch(at: datetime, start: datetime) -> None:
    assert window_bounds(at, 2.0) == (start, start + timedelta(seconds=2))
    assert window_id("s", start) == window_id("s", window_bounds(at, 2.0)[0]) != window_id("t", start)


def test_the_last_tenth_of_a_window_starts_no_call() -> None:
    now = datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)
    budget = budget_of(_declaration(calls_per_window=10, window_seconds=2.0), "acme", now)
    assert budget is not None and budget.closes_at == budget.end - timedelta(seconds=0.2)
    long = budget_of(_declaration(calls_per_window=10, window_seconds=3600.0), "acme", now)
    assert long is not None and long.end - long.closes_at == timedelta(seconds=1)  # at most a second


def test_a_window_gives_out_its_limit_and_no_more() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    window = CallWindow.open(scope="s", start=start, end=start + timedelta(seconds=2), limit=2)
    window.take(window_id("a", start))
    window.take(window_id("b", start))
    assert window.left == 0
    with pytest.raises(ValueError, match="is full"):
        window.take(window_id("c", start))
