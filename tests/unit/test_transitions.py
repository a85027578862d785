"""Table-driven lifecycle tests, generated from ``ledger.lifecycle``.

For every command in ``lifecycle.COMMANDS`` and every execution state and settlement state, an
operation is built in that state through legal commands (``builders``), the command is called
with otherwise-valid arguments, and the outcome must match the table: legal → exactly one event
of the expected type (or the documented return value); illegal → ``IllegalTransitionError`` and
no event. The extra guards each command checks (epoch, lease, due time, approval, attempt
budget, cancellation, deadlines) are tested below the table.
Source: docs/adr/0001-operation-lifecycle.md; DESIGN §4.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from builders import LEASE_SECONDS, PAYLOAD, T0, Built, build, build_settlement, integration, replay, source, state_of

from ledger import lifecycle
from ledger.errors import (
    AttemptBudgetExceededError,
    IllegalTransitionError,
    LeaseExpiredError,
    NaiveDatetimeError,
    StaleEpochError,
)
from ledger.modes import RULES
from ledger.operation import Operation
from ledger.outcomes import FailureCategory
from ledger.status import OUTCOME_STATES, TERMINAL_EXECUTION_STATES, derive_status
from ledger.status import ExecutionState as E
from ledger.status import SettlementState as S

# ---------------------------------------------------------------------------------- the specs


def _same(before: E) -> E:
    return before


@dataclass(frozen=True)
class Spec:
    """How to call one command with otherwise-valid arguments, and what a legal call records.

    ``call(b, epoch)`` runs the command on ``b.op`` with ``epoch`` as the fencing token (ignored
    by unfenced commands) and returns its result. ``prepare`` runs first and may record events
    (cancellation must be requested before ``cancel``). ``after`` maps the execution state
    before the call to the one after a legal call.
    """

    event: type
    call: Callable[[Built, Any], Any]
    overrides: dict[str, Any] = field(default_factory=dict)
    prepare: Callable[[Built], None] = lambda b: None
    returns: Any = None
    after: Callable[[E], E] = _same


def _grant_briefly(b: Built) -> None:
    if b.op.approval == "required" and b.op.execution is E.PENDING:
        b.op.grant_approval(now=b.tick(), principal="approver", roles={"approver"}, valid_seconds=5)


def _request_cancel_if_active(b: Built) -> None:
    if b.op.execution in lifecycle.ACTIVE:
        b.op.request_cancel(now=b.tick(), principal="alice", reason="changed my mind")


def _cancel(b: Built, epoch: Any) -> Any:
    # An unleased pending operation is cancelled by anyone (epoch=None); a leased one by its holder.
    return b.op.cancel(now=b.tick(), epoch=None if b.op.execution is E.PENDING else epoch, reason="asked")


def _exceed_deadline(b: Built, epoch: Any) -> Any:
    deadline = b.op.deadline_at or b.now
    b.now = max(b.now, deadline + timedelta(seconds=1))
    return b.op.exceed_deadline(now=b.at(b.now))


def _exceed_deadline_with(record: Callable[[Built], Any]) -> Callable[[Built, Any], Any]:
    def call(b: Built, epoch: Any) -> Any:
        deadline = b.op.deadline_at or b.now
        b.now = max(b.now, deadline + timedelta(seconds=1))
        return record(b)

    return call


def _resolve(b: Built, epoch: Any) -> Any:
    resolution = "retry_settlement" if b.op.settlement is S.BLOCKED else "failed"
    return b.op.resolve(now=b.tick(), principal="operator", resolution=resolution, evidence="checked the partner")


SPECS: dict[str, Spec] = {
    "grant_approval": Spec(
        Operation.ApprovalGranted,
        lambda b, epoch: b.op.grant_approval(now=b.tick(), principal="approver", roles={"approver"}),
        overrides={"requires_approval": True},
    ),
    "void_approval": Spec(
        Operation.ApprovalVoided,
        lambda b, epoch: b.op.void_approval(now=b.tick(10)),
        overrides={"requires_approval": True},
        prepare=_grant_briefly,
        returns="approval_expired",
    ),
    "wait_for_budget": Spec(
        Operation.BudgetWaited,
        # Pending: unleased. Claimed or dispatching: by the live holder, which gives up its lease
        # (the unleased wait after a lapsed lease: test_a_reclaim_records_its_wait_unleased).
        lambda b, epoch: b.op.wait_for_budget(now=b.tick(), scope="test", until=b.at(b.now + timedelta(seconds=2)),
                                              epoch=None if b.op.execution is E.PENDING else epoch),
    ),
    "deny_approval": Spec(
        Operation.ApprovalDenied,
        lambda b, epoch: b.op.deny_approval(now=b.tick(), principal="approver", reason="too large"),
        overrides={"requires_approval": True},
        after=lambda before: E.FAILED,
    ),
    "claim": Spec(
        Operation.Claimed,
        # Past any lease the builder took, so a reclaim of a leased state is legal.
        lambda b, epoch: b.op.claim(now=b.tick(LEASE_SECONDS + 1), worker_id="worker-2", lease_seconds=30),
        after=lambda before: E.CLAIMED if before is E.PENDING else before,
    ),
    "renew_lease": Spec(
        Operation.LeaseRenewed,
        lambda b, epoch: b.op.renew_lease(epoch=epoch, now=b.tick(), lease_seconds=120),
    ),
    "start_attempt": Spec(
        Operation.AttemptStarted,
        lambda b, epoch: b.op.start_attempt(epoch=epoch, now=b.tick(), attempt_id=uuid4(), request_fingerprint="r"),
        returns=1,
        after=lambda before: E.DISPATCHING,
    ),
    "accept": Spec(
        Operation.Accepted,
        lambda b, epoch: b.op.accept(epoch=epoch, now=b.tick(), attempt_id=b.attempt_id, remote_id="remote-9"),
        after=lambda before: E.ACCEPTED,
    ),
    "observe_remote_status": Spec(
        Operation.RemoteStatusObserved,
        lambda b, epoch: b.op.observe_remote_status(epoch=epoch, now=b.tick(), remote_status="running"),
        returns=True,
    ),
    "mark_remote_unknown": Spec(
        Operation.RemoteOverdue,
        _exceed_deadline_with(lambda b: b.op.mark_remote_unknown(now=b.at(b.now))),
    ),
    "receive_callback": Spec(
        Operation.CallbackReceived,
        lambda b, epoch: b.op.receive_callback(now=b.tick(), callback_id="cb-1", outcome="progress"),
        returns=True,
    ),
    "succeed": Spec(
        Operation.Succeeded,
        lambda b, epoch: b.op.succeed(epoch=epoch, now=b.tick(), attempt_id=b.attempt_id, status_code=200),
        after=lambda before: E.SUCCEEDED,
    ),
    "fail": Spec(
        Operation.Failed,
        lambda b, epoch: b.op.fail(epoch=epoch, now=b.tick(), attempt_id=b.attempt_id,
                                   category=FailureCategory.REJECTED, retryable=False, status_code=400),
        after=lambda before: E.FAILED,
    ),
    "mark_ambiguous": Spec(
        Operation.Ambiguous,
        lambda b, epoch: b.op.mark_ambiguous(epoch=epoch, now=b.tick(), attempt_id=b.attempt_id, reason="timeout"),
        after=lambda before: E.AMBIGUOUS,
    ),
    "schedule_retry": Spec(
        Operation.RetryScheduled,
        lambda b, epoch: b.op.schedule_retry(epoch=epoch, now=b.tick(), attempt_id=b.attempt_id,
                                             retry_at=b.at(b.now + timedelta(seconds=10)),
                                             category=FailureCategory.THROTTLED, reason="503",
                                             possibly_applied=False),
        after=lambda before: E.PENDING,
    ),
    "flag_declaration_mismatch": Spec(
        Operation.DeclarationMismatched,
        lambda b, epoch: b.op.flag_declaration_mismatch(now=b.tick(), worker_id="w2", declared_digest="sha256:other"),
        returns=True,
    ),
    "request_cancel": Spec(
        Operation.CancelRequested,
        lambda b, epoch: b.op.request_cancel(now=b.tick(), principal="alice", reason="changed my mind"),
        returns=True,
    ),
    "cancel": Spec(
        Operation.Cancelled, _cancel, prepare=_request_cancel_if_active, after=lambda before: E.CANCELLED,
    ),
    "cancel_failed": Spec(
        Operation.CancelFailed,
        lambda b, epoch: b.op.cancel_failed(epoch=epoch, now=b.tick(), reason="partner refused"),
        prepare=_request_cancel_if_active,
    ),
    "exceed_deadline": Spec(
        Operation.DeadlineExceeded,
        _exceed_deadline,
        # Documented: failed when no attempt may have applied, ambiguous once egress may have.
        after=lambda before: E.FAILED if before in (E.PENDING, E.CLAIMED) else E.AMBIGUOUS,
    ),
    "exhaust_budget": Spec(
        Operation.BudgetExhausted,
        lambda b, epoch: b.op.exhaust_budget(epoch=epoch, now=b.tick(), last_attempt_possibly_applied=False),
        overrides={"retry": {"max_attempts": 1}},
        after=lambda before: E.FAILED,
    ),
    "fail_settlement": Spec(
        Operation.SettlementFailed,
        lambda b, epoch: b.op.fail_settlement(now=b.tick(), error="entity busy",
                                              retry_at=b.at(b.now + timedelta(seconds=5))),
    ),
    "block_settlement": Spec(
        Operation.SettlementBlocked,
        lambda b, epoch: b.op.block_settlement(now=b.tick(), reason="entity rejected the action"),
    ),
    "settle": Spec(
        Operation.Settled,
        lambda b, epoch: b.op.settle(now=b.tick(), entity_version=3),
    ),
    "note_refused_write": Spec(
        Operation.WriteRefused,
        lambda b, epoch: b.op.note_refused_write(now=b.tick(), kind="outcome", error="P0001: refused", epoch=epoch),
    ),
    "resolve": Spec(
        Operation.Resolved,
        _resolve,
        after=lambda before: E.FAILED if before is E.AMBIGUOUS else before,
    ),
}

UNREACHABLE_PRECONDITION: dict[tuple[str, E], str] = {
    # The table allows exhaust_budget from claimed, but a claimed operation always has an attempt
    # left: RetryScheduled and Resolved(retry) both need one, and only AttemptStarted counts. The
    # command then refuses with "attempts remain" (defence in depth, see the ADR).
    ("exhaust_budget", E.CLAIMED): "attempts remain",
}


def test_specs_cover_every_command() -> None:
    assert set(SPECS) == set(lifecycle.COMMANDS)
    for command in lifecycle.COMMANDS:
        assert callable(getattr(Operation, command)), command
    assert set(lifecycle.BY_EXECUTION).isdisjoint(lifecycle.BY_SETTLEMENT)


def test_table_never_leaves_an_outcome() -> None:
    # Invariants 1 and 3: no execution command runs from a terminal state or from ambiguous;
    # only ``resolve`` leaves ambiguous.
    for command, states in lifecycle.BY_EXECUTION.items():
        assert states.isdisjoint(OUTCOME_STATES), command
    assert lifecycle.RESOLVABLE_EXECUTION == {E.AMBIGUOUS}


def _legal(command: str, op: Operation) -> bool:
    if command in lifecycle.BY_EXECUTION:
        return op.execution in lifecycle.BY_EXECUTION[command]
    if command in lifecycle.BY_SETTLEMENT:
        return op.settlement in lifecycle.BY_SETTLEMENT[command]
    if command in lifecycle.IN_EVERY_STATE:
        return True
    assert command == "resolve"
    return op.execution in lifecycle.RESOLVABLE_EXECUTION or op.settlement in lifecycle.RESOLVABLE_SETTLEMENT


def _cases() -> list[Any]:
    cases = []
    for command in lifecycle.COMMANDS:
        for state in E:
            cases.append(pytest.param(command, "execution", state, id=f"{command}-from-{state.value}"))
        for settlement in S:
            cases.append(pytest.param(command, "settlement", settlement,
                                      id=f"{command}-from-settlement-{settlement.value}"))
    return cases


def _build(kind: str, state: Any, overrides: dict[str, Any]) -> Built:
    return build(state, **overrides) if kind == "execution" else build_settlement(state, **overrides)


@pytest.mark.parametrize(("command", "kind", "state"), _cases())
def test_transition_table(command: str, kind: str, state: Any) -> None:
    spec = SPECS[command]
    b = _build(kind, state, spec.overrides)
    spec.prepare(b)
    b.collect()
    before = b.op.execution
    legal = _legal(command, b.op)

    if not legal and command == "receive_callback" and before in OUTCOME_STATES:
        # A late callback adding nothing to the recorded outcome (here: progress) is accepted
        # and records nothing; a contradicting one is a LateObservationRecorded (tests below).
        snapshot = state_of(b.op)
        assert spec.call(b, b.op.epoch) is False
        assert b.collect() == [] and state_of(b.op) == snapshot
    elif legal and (command, before) in UNREACHABLE_PRECONDITION:
        with pytest.raises(IllegalTransitionError, match=UNREACHABLE_PRECONDITION[(command, before)]):
            spec.call(b, b.op.epoch)
        assert b.collect() == []
    elif legal:
        result = spec.call(b, b.op.epoch)
        if spec.returns is not None:
            assert result == spec.returns
        new = b.collect()
        assert [type(e) for e in new] == [spec.event]
        assert b.op.execution is spec.after(before)
        assert b.op.status is derive_status(b.op.execution, b.op.settlement)
        assert state_of(replay(b.events)) == state_of(b.op)
    else:
        snapshot = state_of(b.op)
        with pytest.raises(IllegalTransitionError) as info:
            spec.call(b, b.op.epoch)
        assert info.value.command == command
        assert b.collect() == []
        assert state_of(b.op) == snapshot


# ---------------------------------------------------------------------------------- replay


@pytest.mark.parametrize("state", list(E), ids=lambda s: s.value)
def test_replay_reproduces_each_execution_state(state: E) -> None:
    b = build(state)
    assert state_of(replay(b.events)) == state_of(b.op)


@pytest.mark.parametrize("state", list(S), ids=lambda s: f"settlement-{s.value}")
def test_replay_reproduces_each_settlement_state(state: S) -> None:
    b = build_settlement(state)
    assert state_of(replay(b.events)) == state_of(b.op)


def test_replay_reproduces_a_long_history() -> None:
    b = build(E.DISPATCHING)
    op = b.op
    first = b.attempt_id
    # Worker 1 is paused past its lease; worker 2 reclaims and retries with the same key.
    epoch2 = op.claim(now=b.tick(LEASE_SECONDS + 5), worker_id="worker-2", lease_seconds=30)
    op.schedule_retry(epoch=epoch2, now=b.tick(), attempt_id=first, retry_at=b.now + timedelta(seconds=5),
                      category=FailureCategory.TIMEOUT, reason="lost response", possibly_applied=True)
    epoch3 = op.claim(now=b.tick(10), worker_id="worker-3", lease_seconds=30)
    op.renew_lease(epoch=epoch3, now=b.tick(), lease_seconds=60)
    op.start_attempt(epoch=epoch3, now=b.tick(), attempt_id=uuid4(), request_fingerprint="r2")
    op.accept(epoch=epoch3, now=b.tick(), attempt_id=op.last_attempt_id, remote_id="lro-7")
    op.observe_remote_status(epoch=epoch3, now=b.tick(), remote_status="running")
    op.receive_callback(now=b.tick(), callback_id="cb-1", outcome="progress", remote_status="half")
    op.receive_callback(now=b.tick(), callback_id="cb-2", outcome="succeeded", remote_status="done")
    op.fail_settlement(now=b.tick(), error="busy", retry_at=b.now + timedelta(seconds=2))
    op.settle(now=b.tick(), entity_version=9)
    b.collect()
    replayed = replay(b.events)
    assert state_of(replayed) == state_of(op)
    assert replayed.version == len(b.events)
    assert (replayed.execution, replayed.settlement, replayed.attempts) == (E.SUCCEEDED, S.SETTLED, 2)
    assert replayed.callback_ids == {"cb-1", "cb-2"}
    assert replayed.disposition == "settled"


# ---------------------------------------------------------------------------------- fencing


FENCED: dict[str, tuple[Any, ...]] = {
    # command: (kind, state) where the command is legal
    "renew_lease": ("execution", E.CLAIMED),
    "start_attempt": ("execution", E.CLAIMED),
    "accept": ("execution", E.DISPATCHING),
    "observe_remote_status": ("execution", E.ACCEPTED),
    "succeed": ("execution", E.DISPATCHING),
    "fail": ("execution", E.DISPATCHING),
    "mark_ambiguous": ("execution", E.DISPATCHING),
    "schedule_retry": ("execution", E.DISPATCHING),
    "cancel": ("execution", E.CLAIMED),
    "cancel_failed": ("execution", E.ACCEPTED),
    "exhaust_budget": ("execution", E.DISPATCHING),
    "wait_for_budget": ("execution", E.DISPATCHING),
}


@pytest.mark.parametrize("delta", [-1, 1], ids=["older", "newer"])
@pytest.mark.parametrize("command", list(FENCED))
def test_stale_epoch_is_rejected(command: str, delta: int) -> None:
    spec = SPECS[command]
    kind, state = FENCED[command]
    b = _build(kind, state, spec.overrides)
    spec.prepare(b)
    b.collect()
    with pytest.raises(StaleEpochError) as info:
        spec.call(b, b.op.epoch + delta)
    assert (info.value.given, info.value.current) == (b.op.epoch + delta, b.op.epoch)
    assert b.collect() == []


def test_a_worker_paused_past_its_lease_is_fenced_after_a_reclaim() -> None:
    b = build(E.DISPATCHING)
    op, old_epoch, attempt = b.op, b.epoch, b.attempt_id
    new_epoch = op.claim(now=b.tick(LEASE_SECONDS + 1), worker_id="rescuer", lease_seconds=30)
    assert new_epoch == old_epoch + 1 and op.execution is E.DISPATCHING and op.lease_takeovers == 1
    with pytest.raises(StaleEpochError):
        op.succeed(epoch=old_epoch, now=b.tick(), attempt_id=attempt)
    with pytest.raises(StaleEpochError):
        op.renew_lease(epoch=old_epoch, now=b.tick(), lease_seconds=30)
    # The rescuer decides the open attempt by delivery mode: idempotent retries with the same key.
    op.schedule_retry(epoch=new_epoch, now=b.tick(), attempt_id=attempt, retry_at=b.now,
                      category=FailureCategory.TIMEOUT, reason="worker lost", possibly_applied=True)
    assert op.execution is E.PENDING and op.possibly_applied


def test_outcome_for_an_older_attempt_is_rejected() -> None:
    b = build(E.DISPATCHING)
    with pytest.raises(IllegalTransitionError, match="latest attempt"):
        b.op.succeed(epoch=b.epoch, now=b.tick(), attempt_id=uuid4())


# ---------------------------------------------------------------------------------- leases and claims


@pytest.mark.parametrize("command", ["start_attempt", "renew_lease"])
def test_expired_lease_refuses_egress_and_renewal(command: str) -> None:
    b = build(E.CLAIMED)
    assert b.op.lease_expires_at is not None
    b.now = b.op.lease_expires_at  # expiry is inclusive: at the instant, the lease is gone
    with pytest.raises(LeaseExpiredError):
        if command == "start_attempt":
            b.op.start_attempt(epoch=b.epoch, now=b.now, attempt_id=uuid4(), request_fingerprint="r")
        else:
            b.op.renew_lease(epoch=b.epoch, now=b.now, lease_seconds=60)
    assert b.collect() == []


def test_claim_refuses_while_the_lease_is_live() -> None:
    b = build(E.CLAIMED)
    with pytest.raises(IllegalTransitionError, match="lease is still held"):
        b.op.claim(now=b.tick(), worker_id="worker-2", lease_seconds=30)


def test_claim_refuses_awaiting_approval_and_before_due() -> None:
    b = build(E.PENDING, requires_approval=True)
    with pytest.raises(IllegalTransitionError, match="awaiting approval"):
        b.op.claim(now=b.tick(), worker_id="w", lease_seconds=30)
    b.op.grant_approval(now=b.tick(), principal="approver", roles={"approver"})
    with pytest.raises(IllegalTransitionError, match="approval is granted"):
        b.op.grant_approval(now=b.tick(), principal="approver", roles={"approver"})

    b = build(E.DISPATCHING)
    b.op.schedule_retry(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id,
                        retry_at=b.now + timedelta(seconds=30), category=FailureCategory.THROTTLED,
                        reason="429", possibly_applied=False)
    with pytest.raises(IllegalTransitionError, match="not due"):
        b.op.claim(now=b.now + timedelta(seconds=29), worker_id="w", lease_seconds=30)
    assert b.op.claim(now=b.now + timedelta(seconds=30), worker_id="w", lease_seconds=30) == 2


def test_claim_needs_a_positive_lease() -> None:
    b = build(E.PENDING)
    with pytest.raises(ValueError):
        b.op.claim(now=b.tick(), worker_id="w", lease_seconds=0)


def test_approval_is_checked_and_denial_fails_without_egress() -> None:
    b = build(E.PENDING, requires_approval=True)
    b.op.deny_approval(now=b.tick(), principal="approver", reason="too large")
    assert b.op.execution is E.FAILED and b.op.attempts == 0
    assert b.op.failure["category"] == FailureCategory.APPROVAL_DENIED.value
    assert b.op.settlement is S.PENDING


def test_cancel_requested_blocks_egress_and_needs_a_request() -> None:
    b = build(E.CLAIMED)
    with pytest.raises(IllegalTransitionError, match="not requested"):
        b.op.cancel(now=b.tick(), epoch=b.epoch)
    assert b.op.request_cancel(now=b.tick(), principal="alice") is True
    assert b.op.request_cancel(now=b.tick(), principal="alice") is False  # no second event
    with pytest.raises(IllegalTransitionError, match="cancellation was requested"):
        b.op.start_attempt(epoch=b.epoch, now=b.tick(), attempt_id=uuid4(), request_fingerprint="r")
    with pytest.raises(IllegalTransitionError, match="holds the lease"):
        b.op.cancel(now=b.tick(), epoch=None)
    b.op.cancel(now=b.tick(), epoch=b.epoch)
    assert b.op.execution is E.CANCELLED and b.op.disposition == "cancelled"
    assert [type(e) for e in b.collect()] == [Operation.CancelRequested, Operation.Cancelled]


def test_cancel_without_epoch_once_the_lease_expired() -> None:
    b = build(E.CLAIMED)
    b.op.request_cancel(now=b.tick(), principal="alice")
    b.op.cancel(now=b.tick(LEASE_SECONDS), epoch=None)
    assert b.op.execution is E.CANCELLED


# ---------------------------------------------------------------------------------- call budget waits


def _wait(b: Built, seconds: float = 10, epoch: int | None = None, after: float = 0) -> None:
    now = b.tick(after)
    b.op.wait_for_budget(now=now, scope="test.x", until=now + timedelta(seconds=seconds), epoch=epoch)


def test_a_pending_wait_is_recorded_once_per_window() -> None:
    b = build(E.PENDING)
    _wait(b)
    assert (b.op.execution, b.op.budget_wait, b.op.due_at) == (E.PENDING, "test.x", b.op.budget_wait_until)
    with pytest.raises(IllegalTransitionError, match="not due until"):  # a second worker, same window
        _wait(b)
    with pytest.raises(IllegalTransitionError, match="not due until"):
        b.op.claim(now=b.tick(), worker_id="w", lease_seconds=30)
    with pytest.raises(IllegalTransitionError, match="not leased"):
        _wait(b, epoch=b.op.epoch)
    assert [type(e) for e in b.collect()] == [Operation.BudgetWaited]


@pytest.mark.parametrize("state", [E.CLAIMED, E.DISPATCHING], ids=lambda s: s.value)
def test_a_reclaim_records_its_wait_unleased(state: E) -> None:
    b = build(state)
    epoch, holder, lease = b.op.epoch, b.op.worker_id, b.op.lease_expires_at
    with pytest.raises(IllegalTransitionError, match="lease is still held"):
        _wait(b)  # without the lease, nobody but its holder records a wait while it is live
    _wait(b, seconds=10, after=LEASE_SECONDS + 1)  # lapsed: the reclaim records the wait instead of claiming
    until = b.op.budget_wait_until
    # No lease taken, none pretended: the lapsed holder's epoch, lease and worker stay as they were.
    assert (b.op.execution, b.op.epoch, b.op.worker_id, b.op.lease_expires_at) == (state, epoch, holder, lease)
    assert b.op.lease_takeovers == 0 and b.op.next_due_at == until
    with pytest.raises(IllegalTransitionError, match="already waits"):  # once per window
        _wait(b)
    with pytest.raises(IllegalTransitionError, match="waits for a call budget"):
        b.op.claim(now=b.tick(), worker_id="w2", lease_seconds=30)
    assert until is not None
    b.now = until
    assert b.op.claim(now=b.at(b.now), worker_id="w2", lease_seconds=30) == epoch + 1
    assert b.op.lease_takeovers == 1  # the lapse before the wait is a takeover, the wait adds none
    assert (b.op.budget_wait_until, b.op.budget_wait) == (None, "test.x")  # over; its scope stays shown
    b.collect()
    assert state_of(replay(b.events)) == state_of(b.op)


def test_a_holder_that_cannot_look_up_gives_up_its_lease_with_the_wait() -> None:
    b = build(E.DISPATCHING)
    epoch = b.op.epoch
    _wait(b, seconds=10, epoch=epoch)
    until = b.op.budget_wait_until
    assert (b.op.worker_id, b.op.lease_expires_at, b.op.epoch) == (None, None, epoch)
    assert b.op.next_due_at == until and b.op.open_attempt_id == b.attempt_id  # the attempt stays open
    with pytest.raises(LeaseExpiredError):  # the lease was given up: no second wait under it
        _wait(b, epoch=epoch)
    with pytest.raises(IllegalTransitionError, match="already waits"):
        _wait(b)
    assert until is not None
    b.now = until
    b.op.claim(now=b.at(b.now), worker_id="w2", lease_seconds=30)
    assert b.op.lease_takeovers == 0  # a lease given up is not a lapsed one
    b.collect()
    assert state_of(replay(b.events)) == state_of(b.op)


def test_a_holder_whose_lease_lapsed_cannot_record_a_wait_under_it() -> None:
    b = build(E.DISPATCHING)
    with pytest.raises(LeaseExpiredError):
        _wait(b, epoch=b.op.epoch, after=LEASE_SECONDS + 1)
    assert b.collect() == []


def test_a_wait_ends_with_an_outcome() -> None:
    b = build(E.DISPATCHING, deadlines={"dispatching": 5.0})
    _wait(b, seconds=60, after=LEASE_SECONDS + 1)
    b.op.exceed_deadline(now=b.tick())  # the deadline still applies while waiting (invariant 6)
    assert b.op.execution is E.AMBIGUOUS and b.op.budget_wait_until is None


# ---------------------------------------------------------------------------------- budgets and retries


def test_attempt_budget_is_never_exceeded() -> None:
    b = build(E.DISPATCHING)  # max_attempts = 3
    op = b.op
    for _ in range(2):
        op.schedule_retry(epoch=op.epoch, now=b.tick(), attempt_id=op.last_attempt_id, retry_at=b.now,
                          category=FailureCategory.CONNECT, reason="refused", possibly_applied=False)
        epoch = op.claim(now=b.tick(), worker_id="w", lease_seconds=30)
        op.start_attempt(epoch=epoch, now=b.tick(), attempt_id=uuid4(), request_fingerprint="r")
    assert op.attempts == op.max_attempts == 3
    with pytest.raises(AttemptBudgetExceededError):
        op.schedule_retry(epoch=op.epoch, now=b.tick(), attempt_id=op.last_attempt_id, retry_at=b.now,
                          category=FailureCategory.CONNECT, reason="refused", possibly_applied=False)
    op.exhaust_budget(epoch=op.epoch, now=b.tick(), last_attempt_possibly_applied=False)
    assert op.execution is E.FAILED
    assert op.failure["category"] == FailureCategory.ATTEMPTS_EXHAUSTED.value
    assert op.attempts == 3


def test_exhausted_budget_is_ambiguous_when_any_attempt_may_have_applied() -> None:
    b = build(E.DISPATCHING, retry={"max_attempts": 2})
    op = b.op
    op.schedule_retry(epoch=op.epoch, now=b.tick(), attempt_id=op.last_attempt_id, retry_at=b.now,
                      category=FailureCategory.TIMEOUT, reason="read timeout", possibly_applied=True)
    epoch = op.claim(now=b.tick(), worker_id="w", lease_seconds=30)
    op.start_attempt(epoch=epoch, now=b.tick(), attempt_id=uuid4(), request_fingerprint="r")
    op.exhaust_budget(epoch=epoch, now=b.tick(), last_attempt_possibly_applied=False)
    assert op.execution is E.AMBIGUOUS and op.attention == "budget_exhausted"
    assert op.settlement is S.NONE


def test_exhaust_budget_refuses_while_attempts_remain() -> None:
    b = build(E.DISPATCHING)
    with pytest.raises(IllegalTransitionError, match="attempts remain"):
        b.op.exhaust_budget(epoch=b.epoch, now=b.tick(), last_attempt_possibly_applied=False)


@pytest.mark.parametrize("mode", ["non_idempotent", "callback", "recoverable_remote_id"])
def test_possibly_applied_retry_refused_without_a_safe_mode(mode: str) -> None:
    b = build(E.DISPATCHING, delivery_mode=mode)
    with pytest.raises(IllegalTransitionError, match="never retries"):
        b.op.schedule_retry(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, retry_at=b.now,
                            category=FailureCategory.TIMEOUT, reason="read timeout", possibly_applied=True)
    assert b.collect() == []
    # A retry is still fine when nothing can have applied (failure before the request was sent).
    b.op.schedule_retry(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, retry_at=b.now,
                        category=FailureCategory.CONNECT, reason="refused", possibly_applied=False)
    assert b.op.execution is E.PENDING and not b.op.possibly_applied


@pytest.mark.parametrize("mode", [r.mode.value for r in RULES.values() if r.retries_possibly_applied])
def test_possibly_applied_retry_allowed_in_safe_modes(mode: str) -> None:
    b = build(E.DISPATCHING, delivery_mode=mode)
    past = b.now - timedelta(seconds=100)
    b.op.schedule_retry(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, retry_at=past,
                        category=FailureCategory.TIMEOUT, reason="read timeout", possibly_applied=True)
    assert b.op.execution is E.PENDING and b.op.possibly_applied
    assert b.op.due_at == b.now  # a retry time in the past is clamped to now
    assert b.op.open_attempt_id is None and b.op.worker_id is None


# ---------------------------------------------------------------------------------- naive datetimes


def _legal_build(command: str) -> Built:
    spec = SPECS[command]
    if command in lifecycle.BY_SETTLEMENT:
        b = build_settlement(S.PENDING, **spec.overrides)
    elif command == "resolve":
        b = build(E.AMBIGUOUS, **spec.overrides)
    elif command in lifecycle.IN_EVERY_STATE:
        b = build(E.PENDING, **spec.overrides)
    else:
        state = next(s for s in E if s in lifecycle.BY_EXECUTION[command]
                     and (command, s) not in UNREACHABLE_PRECONDITION)
        b = build(state, **spec.overrides)
    spec.prepare(b)
    b.collect()
    return b


@pytest.mark.parametrize("command", lifecycle.COMMANDS)
def test_naive_datetimes_are_refused(command: str) -> None:
    b = _legal_build(command)
    b.naive = True
    with pytest.raises(NaiveDatetimeError):
        SPECS[command].call(b, b.op.epoch)
    assert b.collect() == []


@pytest.mark.parametrize("command", ["schedule_retry", "fail_settlement"])
def test_naive_retry_at_is_refused(command: str) -> None:
    b = _legal_build(command)
    naive = b.now.replace(tzinfo=None)
    with pytest.raises(NaiveDatetimeError, match="retry_at"):
        if command == "schedule_retry":
            b.op.schedule_retry(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, retry_at=naive,
                                category=FailureCategory.THROTTLED, reason="429", possibly_applied=False)
        else:
            b.op.fail_settlement(now=b.tick(), error="busy", retry_at=naive)


def test_intend_refuses_a_naive_now() -> None:
    with pytest.raises(NaiveDatetimeError):
        Operation.intend(now=T0.replace(tzinfo=None), integration=integration(), source=source(), payload=PAYLOAD)


# ---------------------------------------------------------------------------------- callbacks


def test_duplicate_callback_changes_nothing() -> None:
    b = build(E.ACCEPTED)
    op = b.op
    assert op.receive_callback(now=b.tick(), callback_id="cb-1", outcome="progress", remote_status="half")
    assert op.receive_callback(now=b.tick(), callback_id="cb-1", outcome="progress") is False
    assert op.receive_callback(now=b.tick(), callback_id="cb-2", outcome="succeeded", remote_status="done")
    assert op.execution is E.SUCCEEDED and op.remote_status == "done"
    # A duplicate id changes nothing, whatever it claims; a late callback agreeing with the
    # recorded outcome too.
    assert op.receive_callback(now=b.tick(), callback_id="cb-2", outcome="failed") is False
    assert op.receive_callback(now=b.tick(), callback_id="cb-3", outcome="succeeded") is False
    assert [type(e) for e in b.collect()] == [Operation.CallbackReceived] * 2
    # A late callback contradicting the outcome is a fact for operators, never a new outcome.
    assert op.receive_callback(now=b.tick(), callback_id="cb-4", outcome="failed", detail="charge reversed")
    assert [type(e) for e in b.collect()] == [Operation.LateObservationRecorded]
    assert op.execution is E.SUCCEEDED and op.attention == "late_observation"
    assert op.late_observation == {"callback_id": "cb-4", "outcome": "failed", "recorded_outcome": "succeeded",
                                   "remote_status": None, "detail": "charge reversed"}
    assert op.receive_callback(now=b.tick(), callback_id="cb-4", outcome="failed") is False  # its duplicate
    assert b.collect() == []


@pytest.mark.parametrize(("recorded", "reported", "late"), [
    (E.SUCCEEDED, "succeeded", False), (E.SUCCEEDED, "failed", True), (E.SUCCEEDED, "progress", False),
    (E.FAILED, "succeeded", True), (E.FAILED, "failed", False), (E.CANCELLED, "succeeded", True),
    (E.CANCELLED, "failed", False), (E.AMBIGUOUS, "succeeded", True), (E.AMBIGUOUS, "failed", True),
])
def test_late_callback_is_an_observation_never_an_outcome(recorded: E, reported: str, late: bool) -> None:
    b = build(recorded)
    op = b.op
    settlement, failure = op.settlement, op.failure
    assert op.receive_callback(now=b.tick(), callback_id="late-1", outcome=reported) is late
    events = b.collect()
    assert [type(e) for e in events] == ([Operation.LateObservationRecorded] if late else [])
    assert op.execution is recorded and op.settlement is settlement and op.failure == failure
    assert state_of(replay(b.events)) == state_of(op)
    if late and recorded is not E.AMBIGUOUS:
        assert op.attention == "late_observation"
        op.resolve(now=b.tick(), principal="otto", resolution="acknowledge", evidence="provider reversed it later")
        assert op.attention != "late_observation" and op.execution is recorded
    elif late:
        assert op.attention == "ambiguous"  # the stronger reason; the observation is on the timeline


def test_acknowledge_needs_a_late_observation() -> None:
    b = build(E.SUCCEEDED)
    with pytest.raises(IllegalTransitionError, match="nothing to resolve"):
        b.op.resolve(now=b.tick(), principal="otto", resolution="acknowledge", evidence="looked")


def test_callback_must_answer_the_latest_attempt() -> None:
    b = build(E.ACCEPTED)
    with pytest.raises(IllegalTransitionError, match="latest attempt"):
        b.op.receive_callback(now=b.tick(), callback_id="cb-1", outcome="succeeded", attempt_id=uuid4())
    assert b.collect() == []
    assert b.op.receive_callback(now=b.tick(), callback_id="cb-1", outcome="succeeded", attempt_id=b.attempt_id,
                                 signed_at=b.tick())
    assert b.op.execution is E.SUCCEEDED and "cb-1" in b.op.callback_signed_at


def test_callback_carries_its_outcome() -> None:
    b = build(E.DISPATCHING, delivery_mode="callback")
    assert b.op.receive_callback(now=b.tick(), callback_id="cb-1", outcome="failed", detail="card expired")
    assert b.op.execution is E.FAILED
    assert b.op.failure["category"] == FailureCategory.REMOTE_FAILED.value
    assert b.op.settlement is S.PENDING


def test_callback_outcome_must_be_known() -> None:
    b = build(E.ACCEPTED)
    with pytest.raises(ValueError):
        b.op.receive_callback(now=b.tick(), callback_id="cb-1", outcome="maybe")


def test_remote_status_recorded_only_when_it_changes() -> None:
    b = build(E.ACCEPTED)
    assert b.op.observe_remote_status(epoch=b.epoch, now=b.tick(), remote_status="running") is True
    assert b.op.observe_remote_status(epoch=b.epoch, now=b.tick(), remote_status="running") is False
    assert len(b.collect()) == 1


# ---------------------------------------------------------------------------------- settlement


def test_second_settle_raises() -> None:
    b = build_settlement(S.SETTLED)
    with pytest.raises(IllegalTransitionError):
        b.op.settle(now=b.tick(), entity_version=4)
    assert b.collect() == []
    assert b.op.settled_entity_version == 3


@pytest.mark.parametrize("outcome", sorted(TERMINAL_EXECUTION_STATES), ids=lambda s: s.value)
def test_every_terminal_outcome_settles_once(outcome: E) -> None:
    b = build_settlement(S.PENDING, outcome=outcome)
    b.op.settle(now=b.tick(), entity_version=3)
    assert b.op.status.value == "settled"
    with pytest.raises(IllegalTransitionError):
        b.op.settle(now=b.tick(), entity_version=3)


def test_no_settlement_action_means_not_required() -> None:
    b = build_settlement(S.NOT_REQUIRED, outcome=E.SUCCEEDED)
    assert b.op.attention is None and b.op.next_due_at is None
    failed = build_settlement(S.NOT_REQUIRED, outcome=E.FAILED)
    assert failed.op.attention == "dead_letter"


def test_settlement_tries_end_in_blocked() -> None:
    b = build_settlement(S.PENDING)  # settlement.max_attempts = 3
    op = b.op
    op.fail_settlement(now=b.tick(), error="busy", retry_at=b.now + timedelta(seconds=1))
    op.fail_settlement(now=b.tick(), error="busy", retry_at=b.now + timedelta(seconds=1))
    with pytest.raises(IllegalTransitionError, match="used up"):
        op.fail_settlement(now=b.tick(), error="busy", retry_at=b.now + timedelta(seconds=1))
    op.block_settlement(now=b.tick(), reason="busy three times")
    assert op.status.value == "settlement_blocked" and op.attention == "settlement_blocked"
    assert op.settlement_attempts == 3


# ---------------------------------------------------------------------------------- resolve


def test_resolve_ambiguous_as_succeeded() -> None:
    b = build(E.AMBIGUOUS, delivery_mode="non_idempotent")
    assert b.op.attention == "ambiguous" and b.op.deadline_at is None
    b.op.resolve(now=b.tick(), principal="op", resolution="succeeded", evidence="partner dashboard shows it")
    assert (b.op.execution, b.op.settlement, b.op.disposition) == (E.SUCCEEDED, S.PENDING, "resolved")
    assert b.op.attention is None


def test_resolve_ambiguous_as_failed() -> None:
    b = build(E.AMBIGUOUS)
    b.op.resolve(now=b.tick(), principal="op", resolution="failed", evidence="partner has no record")
    assert b.op.execution is E.FAILED and b.op.failure["category"] == FailureCategory.OPERATOR.value
    assert b.op.disposition == "resolved"


def test_resolve_ambiguous_with_retry_reopens_the_operation() -> None:
    b = build(E.AMBIGUOUS, delivery_mode="non_idempotent")
    b.op.resolve(now=b.tick(), principal="op", resolution="retry", evidence="partner has no record")
    assert b.op.execution is E.PENDING and not b.op.possibly_applied and b.op.ambiguity_reason is None
    epoch = b.op.claim(now=b.tick(), worker_id="w", lease_seconds=30)
    assert b.op.start_attempt(epoch=epoch, now=b.tick(), attempt_id=uuid4(), request_fingerprint="r") == 2


def test_resolve_retry_needs_an_attempt_left() -> None:
    b = build(E.AMBIGUOUS, retry={"max_attempts": 1})
    with pytest.raises(IllegalTransitionError, match="no attempt left"):
        b.op.resolve(now=b.tick(), principal="op", resolution="retry", evidence="checked")


def _overdue() -> Built:
    b = build(E.ACCEPTED)
    b.now = (b.op.deadline_at or b.now) + timedelta(seconds=1)
    b.op.mark_remote_unknown(now=b.at(b.now))
    assert b.op.attention == "remote_unknown" and b.op.execution is E.ACCEPTED
    return b


@pytest.mark.parametrize(("resolution", "after"), [("succeeded", E.SUCCEEDED), ("failed", E.FAILED)])
def test_an_operator_resolves_remote_unknown_work(resolution: str, after: E) -> None:
    b = _overdue()
    b.op.resolve(now=b.tick(), principal="op", resolution=resolution, evidence="the provider's console says so")
    assert (b.op.execution, b.op.settlement, b.op.disposition) == (after, S.PENDING, "resolved")


@pytest.mark.parametrize("resolution", ["retry", "abandon", "retry_settlement"])
def test_remote_unknown_work_is_not_retried_or_abandoned(resolution: str) -> None:
    b = _overdue()
    with pytest.raises(IllegalTransitionError, match="resolution must be one of succeeded, failed"):
        b.op.resolve(now=b.tick(), principal="op", resolution=resolution, evidence="checked")


def test_accepted_work_before_its_deadline_is_not_resolvable() -> None:
    b = build(E.ACCEPTED)
    with pytest.raises(IllegalTransitionError, match="nothing to resolve"):
        b.op.resolve(now=b.tick(), principal="op", resolution="succeeded", evidence="checked")


def test_resolve_abandon_is_final() -> None:
    b = build(E.AMBIGUOUS)
    b.op.resolve(now=b.tick(), principal="op", resolution="abandon", evidence="written off")
    assert b.op.execution is E.AMBIGUOUS and b.op.disposition == "abandoned" and b.op.attention is None
    with pytest.raises(IllegalTransitionError, match="already abandoned"):
        b.op.resolve(now=b.tick(), principal="op", resolution="failed", evidence="checked")


def test_resolve_blocked_settlement() -> None:
    b = build_settlement(S.BLOCKED)
    with pytest.raises(IllegalTransitionError, match="resolution must be one of"):
        b.op.resolve(now=b.tick(), principal="op", resolution="succeeded", evidence="checked")
    b.op.resolve(now=b.tick(), principal="op", resolution="retry_settlement", evidence="entity fixed")
    assert b.op.settlement is S.PENDING and b.op.settlement_attempts == 0
    b.op.settle(now=b.tick(), entity_version=5)
    assert b.op.status.value == "settled"

    b = build_settlement(S.BLOCKED)
    b.op.resolve(now=b.tick(), principal="op", resolution="abandon", evidence="entity deleted")
    assert b.op.disposition == "abandoned" and b.op.attention is None


def test_resolve_rejects_wrong_resolution_and_missing_evidence() -> None:
    b = build(E.AMBIGUOUS)
    with pytest.raises(IllegalTransitionError, match="resolution must be one of"):
        b.op.resolve(now=b.tick(), principal="op", resolution="retry_settlement", evidence="checked")
    with pytest.raises(ValueError, match="evidence"):
        b.op.resolve(now=b.tick(), principal="op", resolution="failed", evidence="  ")
    assert b.collect() == []


# ---------------------------------------------------------------------------------- deadlines


@pytest.mark.parametrize("state", sorted(lifecycle.ACTIVE), ids=lambda s: s.value)
def test_exceed_deadline_before_the_deadline_raises(state: E) -> None:
    b = build(state)
    deadline = b.op.deadline_at
    assert deadline == b.op.state_entered_at + timedelta(seconds=b.op.deadlines[state.value])
    with pytest.raises(IllegalTransitionError, match="the deadline is"):
        b.op.exceed_deadline(now=deadline - timedelta(microseconds=1))
    assert b.collect() == []
    b.op.exceed_deadline(now=deadline)  # the deadline itself counts as passed
    assert [type(e) for e in b.collect()] == [Operation.DeadlineExceeded]


@pytest.mark.parametrize(
    ("state", "expected"),
    [(E.PENDING, E.FAILED), (E.CLAIMED, E.FAILED), (E.DISPATCHING, E.AMBIGUOUS), (E.ACCEPTED, E.AMBIGUOUS)],
    ids=lambda v: v.value,
)
def test_exceed_deadline_outcome(state: E, expected: E) -> None:
    b = build(state)
    b.op.exceed_deadline(now=b.op.deadline_at + timedelta(seconds=1))
    assert b.op.execution is expected
    if expected is E.FAILED:
        assert b.op.failure["category"] == FailureCategory.DEADLINE.value
        assert b.op.settlement is S.PENDING
    else:
        assert b.op.ambiguity_reason == "deadline_exceeded" and b.op.attention == "ambiguous"
        assert b.op.settlement is S.NONE


def test_pending_retry_after_a_possibly_applied_attempt_times_out_ambiguous() -> None:
    b = build(E.DISPATCHING)
    b.op.schedule_retry(epoch=b.epoch, now=b.tick(), attempt_id=b.attempt_id, retry_at=b.now,
                        category=FailureCategory.TIMEOUT, reason="lost response", possibly_applied=True)
    b.op.exceed_deadline(now=b.op.deadline_at)
    assert b.op.execution is E.AMBIGUOUS


@pytest.mark.parametrize("state", [E.SUCCEEDED, E.FAILED, E.CANCELLED, E.AMBIGUOUS], ids=lambda s: s.value)
def test_no_deadline_outside_active_states(state: E) -> None:
    assert build(state).op.deadline_at is None


# ---------------------------------------------------------------------------------- attention


def test_repeated_lease_expiry_needs_attention() -> None:
    b = build(E.DISPATCHING, deadlines={"dispatching": 86_400.0})
    for n in range(1, 4):
        b.op.claim(now=b.tick(LEASE_SECONDS + 1), worker_id=f"rescuer-{n}", lease_seconds=LEASE_SECONDS)
        assert b.op.lease_takeovers == n
    assert b.op.attention == "lease_expired_repeatedly"


# ---------------------------------------------------------------------------------- the ADR


ADR = Path(__file__).resolve().parents[2] / "docs" / "adr" / "0001-operation-lifecycle.md"


def _adr_from_column() -> dict[str, set[Any]]:
    text = ADR.read_text()
    section = text.split("## The transition table", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[Any]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        command = cells[0].strip("`")
        states: set[Any] = set()
        for name in cells[2].split(","):
            name = name.strip()
            states.add(S(name.removeprefix("settlement ")) if name.startswith("settlement ") else E(name))
        rows[command] = states
    return rows


def test_adr_renders_the_transition_table() -> None:
    rows = _adr_from_column()
    expected: dict[str, set[Any]] = {c: set(s) for c, s in lifecycle.BY_EXECUTION.items()}
    expected.update({c: set(s) for c, s in lifecycle.BY_SETTLEMENT.items()})
    expected["resolve"] = set(lifecycle.RESOLVABLE_EXECUTION) | set(lifecycle.RESOLVABLE_SETTLEMENT)
    expected.update({c: set(E) for c in lifecycle.IN_EVERY_STATE})
    assert rows == expected
    assert list(rows) == list(lifecycle.COMMANDS)


def test_the_last_waits_scope_stays_shown_after_the_claim() -> None:
    # ``ops show``'s ``budget_wait`` is "the scope of its last wait" (guide, 'Budgets'): a claim
    # ends the wait (``budget_wait_until``) but not the record of what it waited for (tryout B17).
    b = build(E.PENDING)
    _wait(b)
    b.op.claim(now=b.tick(10), worker_id="w", lease_seconds=30)
    assert (b.op.execution, b.op.budget_wait, b.op.budget_wait_until) == (E.CLAIMED, "test.x", None)


# ------------------------------------------------------------------ progress callbacks (issue 27 item 4)

def test_a_progress_callback_repeating_the_last_for_its_attempt_records_nothing() -> None:
    b = build(E.ACCEPTED, delivery_mode="callback")
    b.collect()
    first = b.attempt_id

    def report(callback_id: str, status: str = "RUNNING", detail: str = "40%", attempt: Any = None) -> bool:
        return b.op.receive_callback(now=b.tick(), callback_id=callback_id, outcome="progress", remote_status=status,
                                     detail=detail, attempt_id=attempt or first)

    assert report("cb-1") and [type(e).__name__ for e in b.collect()] == ["CallbackReceived"]
    assert not report("cb-2") and not report("cb-3") and b.collect() == []  # the same report again
    assert report("cb-4", detail="60%") and report("cb-5", status="COPYING", detail="60%")
    assert len(b.collect()) == 2
    assert replay(b.events).last_progress == (first, "COPYING", "60%")  # rebuilt from the log alike
    assert b.op.receive_callback(now=b.tick(), callback_id="cb-6", outcome="succeeded", attempt_id=first)


# ------------------------------------------------------------------ retry evidence (issue 34 item 5)

def test_a_retried_500_and_the_budget_it_exhausts_keep_the_status_and_the_excerpt() -> None:
    from executors.outcomes import apply_decision
    from ledger.decisions import decide
    from ledger.declarations import RetryPolicy
    from ledger.modes import DeliveryMode
    from ledger.outcomes import Ambiguous

    b = build(E.DISPATCHING, delivery_mode="idempotent", retry={"max_attempts": 2, "base_backoff_seconds": 1})
    b.collect()
    answer = Ambiguous(reason="server_error", category=FailureCategory.SERVER_ERROR, status_code=500,
                       detail='{"error": "database is down"}')
    policy = RetryPolicy(max_attempts=2, base_backoff_seconds=1, max_backoff_seconds=1, jitter=0.0)

    class NoJitter:
        def random(self) -> float:
            return 0.0

    def answered() -> Any:
        decision = decide(outcome=answer, mode=DeliveryMode.IDEMPOTENT, policy=policy, attempts=b.op.attempts,
                          now=b.tick(), rng=NoJitter())
        apply_decision(b.op, b.epoch, decision, b.now)
        return b.collect()[-1]

    retried = answered()
    assert type(retried).__name__ == "RetryScheduled"
    assert (retried.status_code, retried.detail) == (500, '{"error": "database is down"}')
    b.now += timedelta(seconds=5)
    b.op.claim(now=b.tick(), worker_id="worker-1", lease_seconds=LEASE_SECONDS)
    b.op.start_attempt(epoch=b.epoch, now=b.tick(), attempt_id=uuid4(), request_fingerprint="req-2")
    b.collect()
    exhausted = answered()
    assert type(exhausted).__name__ == "BudgetExhausted" and exhausted.status_code == 500
    assert exhausted.detail == '{"error": "database is down"}'
