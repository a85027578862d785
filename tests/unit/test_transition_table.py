"""The machine-readable transition table (``ledger.transitions``) against the aggregate, the
ADR's table and the error classes; the claim decisions (``ledger.decisions.claim_plan``); the
cut of the aggregate into modules by concern.

Source: issue 33 item 1; docs/adr/0001-operation-lifecycle.md.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from builders import build, build_settlement
from test_transitions import ADR, SPECS, UNREACHABLE_PRECONDITION, _legal

from ledger import decisions, transition_errors, transitions
from ledger.decisions import ClaimStep, claim_makes_call, claim_plan
from ledger.errors import IllegalTransitionError
from ledger.status import ExecutionState as E
from ledger.status import SettlementState as S

ROOT = Path(__file__).resolve().parents[2]
FENCING = {"epoch", "lease_live", "fence", "epoch_if_given", "lease_free_or_epoch", "authenticated", "callback_new",
           "contradicts", "remote_overdue", "ambiguity"}
"""Table guards that no ``transition_errors`` class names: the fencing errors (``StaleEpochError``,
``LeaseExpiredError``, ``StaleSettlementError``), the inbound adapter's checks, and rules whose
failure records or returns something else (a duplicate callback returns False)."""


def _cases() -> list[Any]:
    cases = []
    for command in SPECS:
        for state in E:
            cases.append(pytest.param(command, "execution", state, id=f"{command}-{state.value}"))
        for settlement in (S.PENDING, S.BLOCKED):
            cases.append(pytest.param(command, "settlement", settlement, id=f"{command}-settlement-{settlement.value}"))
    return cases


@pytest.mark.parametrize(("command", "kind", "state"), _cases())
def test_the_aggregate_moves_as_the_table_says(command: str, kind: str, state: Any) -> None:
    # Every legal call records an event of a row for (command, state) and lands where that row
    # says; ``to`` None means the state it was called from.
    spec = SPECS[command]
    b = build(state, **spec.overrides) if kind == "execution" else build_settlement(state, **spec.overrides)
    spec.prepare(b)
    b.collect()
    if not _legal(command, b.op) or (command, b.op.execution) in UNREACHABLE_PRECONDITION:
        return
    settlement_kind = command in ("fail_settlement", "block_settlement", "settle") or (
        command == "resolve" and b.op.settlement is S.BLOCKED)
    before: Any = b.op.settlement if settlement_kind else b.op.execution
    spec.call(b, b.op.epoch)
    [event] = b.collect()
    after: Any = b.op.settlement if settlement_kind else b.op.execution
    rows = [row for row in transitions.rows_for(command) if row.source == before and row.event == type(event).__name__]
    assert rows, f"no row for {command} from {before.value} recording {type(event).__name__}"
    assert after in {row.to if row.to is not None else before for row in rows}


def _adr_rows() -> dict[str, list[str]]:
    section = ADR.read_text().split("## The transition table", 1)[1].split("\n## ", 1)[0]
    return {cells[0].strip("`"): cells for line in section.splitlines() if line.startswith("| `")
            for cells in [[c.strip() for c in line.strip("|").split(" | ")]]}


def test_the_adrs_table_names_the_tables_events_and_targets() -> None:
    adr = _adr_rows()
    assert set(adr) == set(transitions.commands()) - {"intend"}
    for command, cells in adr.items():
        events = {row.event for row in transitions.rows_for(command) if row.event != transitions.LATE_OBSERVATION}
        assert {cells[1].strip("`")} == events, command
        for row in transitions.rows_for(command):
            if row.to is not None:
                assert row.to.value in cells[4], (command, row.to.value)


def test_the_table_is_consistent() -> None:
    assert transitions.commands()[0] == "intend"
    for row in transitions.TRANSITIONS:
        if row.to is not None and row.source is not None:
            assert type(row.to) is type(row.source), row
        assert row.source not in (E.SUCCEEDED, E.FAILED, E.CANCELLED) or row.to is None, row  # invariant 1
    # Invariant 6: every active state has a deadline row, so no active state waits forever.
    assert {row.source for row in transitions.rows_for("exceed_deadline")} == set(decisions.ACTIVE_STATES)
    # Invariant 1: nothing but ``start_attempt`` enters dispatching, and only from claimed.
    assert [(row.command, row.source) for row in transitions.TRANSITIONS if row.to is E.DISPATCHING] == [
        ("start_attempt", E.CLAIMED)]


def test_every_guard_is_a_named_rule() -> None:
    rules = {getattr(transition_errors, name).rule for name in transition_errors.__all__}
    assert len(rules) == len(transition_errors.__all__), "two classes name one rule"
    assert transitions.GUARDS - rules <= FENCING, transitions.GUARDS - rules - FENCING


def test_every_rule_error_is_documented_and_caught_by_the_root() -> None:
    for name in transition_errors.__all__:
        cls = getattr(transition_errors, name)
        assert issubclass(cls, IllegalTransitionError) and cls is not IllegalTransitionError
        assert cls.__doc__ and "Fix:" in cls.__doc__, name


def test_every_illegal_transition_raised_is_a_named_subclass() -> None:
    found = []
    for package in ("ledger", "executors", "adapters", "projections"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) \
                        and getattr(node.exc.func, "id", None) == "IllegalTransitionError":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_the_aggregate_is_cut_by_concern() -> None:
    assert not (ROOT / "ledger" / "commands.py").exists()
    assert len((ROOT / "ledger" / "operation.py").read_text().splitlines()) < 400
    for folder in ("commands", "events"):
        for path in (ROOT / "ledger" / folder).glob("*.py"):
            assert len(path.read_text().splitlines()) <= 250, path.name


def test_no_claim_rule_is_restated_outside_the_decisions() -> None:
    # The claim service and its budget ask ``claim_plan`` / ``claim_makes_call`` (issue 33's three sites).
    for name in ("attempts.py", "budgets.py"):
        text = (ROOT / "executors" / name).read_text()
        assert "cancels_unsent" not in text and "max_attempts" not in text.split('"""', 2)[2], name


@pytest.mark.parametrize(("state", "step"), [
    (E.PENDING, ClaimStep.SEND), (E.CLAIMED, ClaimStep.SEND), (E.DISPATCHING, ClaimStep.RECOVER),
    (E.ACCEPTED, ClaimStep.FOLLOW), (E.SUCCEEDED, ClaimStep.NOTHING), (E.AMBIGUOUS, ClaimStep.NOTHING),
])
def test_claim_plan(state: E, step: ClaimStep) -> None:
    assert claim_plan(build(state).op) is step


def test_claim_plan_cancels_unsent_and_exhausts() -> None:
    b = build(E.PENDING)
    b.op.request_cancel(now=b.tick(), principal="alice")
    assert claim_plan(b.op) is ClaimStep.CANCEL and not claim_makes_call(b.op)
    assert claim_plan(build(E.CLAIMED).op) is ClaimStep.SEND and claim_makes_call(build(E.CLAIMED).op)
    # No legal history reaches a claimable operation with no attempt left (a retry and
    # ``Resolved(retry)`` both need one): the rule is defence in depth, tested on plain state.
    spent = SimpleNamespace(execution=E.PENDING, cancel_requested=False, possibly_applied=False, attempts=3,
                            max_attempts=3)
    assert claim_plan(spent) is ClaimStep.EXHAUST  # type: ignore[arg-type]


@pytest.mark.parametrize(("mode", "calls"), [("idempotent", False), ("recoverable_remote_id", True),
                                             ("non_idempotent", False), ("callback", False), ("read_only", False)])
def test_recovering_makes_a_call_only_to_look_up(mode: str, calls: bool) -> None:
    assert claim_makes_call(build(E.DISPATCHING, delivery_mode=mode).op) is calls
