"""Table tests for ``ledger.decisions`` (STYLE rule 16): what is due for an operation now, and
what to record after an attempt. The expectations are written out by hand, row by row, from
DESIGN §4-§7; they are not computed by the code under test."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from ledger.decisions import (
    CANCEL,
    CLAIM,
    POLL,
    RECLAIM,
    SETTLE,
    AwaitCallback,
    BlockSettlement,
    Claim,
    ExceedDeadline,
    GiveUp,
    Lookup,
    MarkRemoteUnknown,
    Reclaim,
    Record,
    Retry,
    RetrySettlement,
    Wait,
    after_lookup,
    after_settlement_failure,
    backoff_seconds,
    decide,
    due_at,
    due_work,
    may_need_egress,
    time_problem,
)
from ledger.declarations import DeliveryMode, RetryPolicy
from ledger.outcomes import Accepted, Ambiguous, Failed, FailureCategory, Succeeded
from ledger.status import APPROVAL_NOT_REQUIRED, APPROVAL_REQUIRED, ExecutionState, SettlementState

E, S = ExecutionState, SettlementState
UTC = UTC
T0 = datetime(2026, 1, 1, tzinfo=UTC)
DEADLINE = 100  # seconds after entering the state, for every state
DUE, LEASE, SETTLEMENT_DUE = 10, 30, 5  # seconds after T0
WINDOW_END = 60  # seconds after T0: a recorded call budget wait's ``until``
LIMIT = 1000  # the hard limit on following accepted work, seconds after T0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass
class State:
    """A plain ``OperationState``: the fields ``due_work`` reads, set directly."""

    execution: ExecutionState
    settlement: SettlementState = S.NONE
    approval: str = APPROVAL_NOT_REQUIRED
    cancel_requested: bool = False
    possibly_applied: bool = False
    state_entered_at: datetime = T0
    deadlines: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("pending", "claimed", "dispatching", "accepted"), float(DEADLINE)))
    due_at: datetime = at(DUE)
    lease_expires_at: datetime | None = None
    budget_wait_until: datetime | None = None
    settlement_due_at: datetime | None = None
    follow: str | None = None
    follow_until: datetime | None = None
    remote_overdue: bool = False
    cancel_refused: bool = False
    write_refused: str | None = None


def state(execution: ExecutionState, **kw: object) -> State:
    if execution in (E.CLAIMED, E.DISPATCHING):
        kw.setdefault("lease_expires_at", at(LEASE))
    if kw.get("settlement") is S.PENDING:
        kw.setdefault("settlement_due_at", at(SETTLEMENT_DUE))
    return State(execution, **kw)  # type: ignore[arg-type]


NEVER = Wait(None)
TERMINAL = (E.SUCCEEDED, E.FAILED, E.CANCELLED)

# (name, state, [(seconds after T0, expected work), ...]): before, at and after each instant.
TABLE = [
    # A write the store refused (issue 35): nothing is due, not even a deadline, until an operator acts.
    ("pending, a claim refused", state(E.PENDING, write_refused="claim"),
     [(0, NEVER), (DUE, NEVER), (DEADLINE + 1, NEVER)]),
    ("dispatching, a renewal refused, lease expired", state(E.DISPATCHING, write_refused="renewal"),
     [(LEASE + 1, NEVER), (DEADLINE + 1, NEVER)]),
    ("succeeded, a settlement refused", state(E.SUCCEEDED, settlement=S.PENDING, write_refused="settlement"),
     [(SETTLEMENT_DUE, NEVER)]),
    ("pending, approved", state(E.PENDING),
     [(0, Wait(at(DUE))), (DUE, CLAIM), (50, CLAIM), (DEADLINE, ExceedDeadline(at(DEADLINE)))]),
    ("pending, awaiting approval", state(E.PENDING, approval=APPROVAL_REQUIRED),
     [(0, Wait(at(DEADLINE))), (DUE, Wait(at(DEADLINE))), (DEADLINE, ExceedDeadline(at(DEADLINE)))]),
    ("pending, approved, cancel requested", state(E.PENDING, cancel_requested=True),
     [(0, Wait(at(DUE))), (DUE, CANCEL), (DEADLINE + 1, ExceedDeadline(at(DEADLINE)))]),
    ("pending, cancel requested, an earlier attempt may have applied: sent again to learn",
     state(E.PENDING, cancel_requested=True, possibly_applied=True),
     [(0, Wait(at(DUE))), (DUE, CLAIM), (DEADLINE, ExceedDeadline(at(DEADLINE)))]),
    ("pending, awaiting approval, cancel requested",
     state(E.PENDING, approval=APPROVAL_REQUIRED, cancel_requested=True),
     [(0, Wait(at(DUE))), (DUE, CANCEL), (DEADLINE, ExceedDeadline(at(DEADLINE)))]),
    *[(f"{s.value}, lease held then expired", state(s),
       [(0, Wait(at(LEASE))), (LEASE - 1, Wait(at(LEASE))), (LEASE, RECLAIM), (DEADLINE, ExceedDeadline(at(DEADLINE)))])
      for s in (E.CLAIMED, E.DISPATCHING)],
    # A call budget wait (BudgetWaited) recorded by a reclaim after the lease lapsed, or by a
    # holder that gave its lease up with it: due when the limiting window ends, not before.
    *[(f"{s.value}, lease lapsed, waits for a call budget", state(s, budget_wait_until=at(WINDOW_END)),
       [(LEASE, Wait(at(WINDOW_END))), (WINDOW_END - 1, Wait(at(WINDOW_END))), (WINDOW_END, RECLAIM),
        (DEADLINE, ExceedDeadline(at(DEADLINE)))])
      for s in (E.CLAIMED, E.DISPATCHING)],
    *[(f"{s.value}, lease given up with a budget wait", state(s, lease_expires_at=None, budget_wait_until=at(WINDOW_END)),
       [(0, Wait(at(WINDOW_END))), (WINDOW_END, RECLAIM)])
      for s in (E.CLAIMED, E.DISPATCHING)],
    # Whichever of the lease and the wait ends later decides (a wait is recorded only once the
    # lease lapsed or with it given up, so this is the rule's edge, not a path the worker takes).
    ("dispatching, wait ends before the lease", state(E.DISPATCHING, budget_wait_until=at(LEASE - 10)),
     [(LEASE - 10, Wait(at(LEASE))), (LEASE, RECLAIM)]),
    ("pending, waits for a call budget (due_at moved to the window's end)",
     state(E.PENDING, due_at=at(WINDOW_END), budget_wait_until=at(WINDOW_END)),
     [(DUE, Wait(at(WINDOW_END))), (WINDOW_END, CLAIM)]),
    ("accepted (waits for its result; no lease)", state(E.ACCEPTED, lease_expires_at=at(LEASE)),
     [(0, Wait(at(DEADLINE))), (LEASE, Wait(at(DEADLINE))), (DEADLINE, ExceedDeadline(at(DEADLINE)))]),
    ("accepted, polled, no poller yet", state(E.ACCEPTED, follow="poll", follow_until=at(LIMIT)),
     [(0, POLL), (50, POLL), (DEADLINE, MarkRemoteUnknown(at(DEADLINE)))]),
    ("accepted, polled, poll lease held", state(E.ACCEPTED, follow="poll", follow_until=at(LIMIT),
                                                lease_expires_at=at(LEASE)),
     [(0, Wait(at(LEASE))), (LEASE, POLL), (DEADLINE, MarkRemoteUnknown(at(DEADLINE)))]),
    ("accepted, polled, past the accepted deadline (remote_unknown)",
     state(E.ACCEPTED, follow="poll", follow_until=at(LIMIT), remote_overdue=True, lease_expires_at=at(LEASE)),
     [(0, Wait(at(LEASE))), (DEADLINE, POLL), (LIMIT - 1, POLL), (LIMIT, ExceedDeadline(at(LIMIT)))]),
    ("accepted, waiting for a callback", state(E.ACCEPTED, follow="callback", follow_until=at(LIMIT)),
     [(0, Wait(at(DEADLINE))), (DEADLINE, MarkRemoteUnknown(at(DEADLINE)))]),
    ("accepted, waiting for a callback, cancel requested",
     state(E.ACCEPTED, follow="callback", follow_until=at(LIMIT), cancel_requested=True),
     [(0, POLL), (DEADLINE, MarkRemoteUnknown(at(DEADLINE)))]),
    ("accepted, waiting for a callback, cancel failed",
     state(E.ACCEPTED, follow="callback", follow_until=at(LIMIT), cancel_requested=True, cancel_refused=True,
           lease_expires_at=at(LEASE)),
     [(0, Wait(at(DEADLINE))), (LEASE, Wait(at(DEADLINE))), (DEADLINE, MarkRemoteUnknown(at(DEADLINE)))]),
    ("ambiguous (waits for an operator)", state(E.AMBIGUOUS), [(0, NEVER), (10**6, NEVER)]),
    *[(f"{s.value}, settlement pending", state(s, settlement=S.PENDING),
       [(0, Wait(at(SETTLEMENT_DUE))), (SETTLEMENT_DUE, SETTLE), (10**6, SETTLE)]) for s in TERMINAL],
    *[(f"{s.value}, settlement {z.value}", state(s, settlement=z), [(0, NEVER), (10**6, NEVER)])
      for s in TERMINAL for z in (S.SETTLED, S.BLOCKED, S.NOT_REQUIRED)],
]


@pytest.mark.parametrize("mode", list(DeliveryMode))
@pytest.mark.parametrize(("name", "op", "rows"), TABLE, ids=[row[0] for row in TABLE])
def test_due_work_table(name: str, op: State, rows: list, mode: DeliveryMode) -> None:
    # The delivery mode changes what is recorded after an attempt, never what is due: the
    # same table holds for every mode.
    for seconds, expected in rows:
        assert due_work(op, at(seconds)) == expected, f"{name} at +{seconds}s ({mode.value})"


def test_the_table_covers_every_execution_and_settlement_state() -> None:
    covered = {(row[1].execution, row[1].settlement) for row in TABLE}
    assert {e for e, _ in covered} == set(E)
    assert {z for _, z in covered} == set(S)


def test_a_deadline_past_year_9999_is_reported_not_raised() -> None:
    op = state(E.PENDING, state_entered_at=datetime(9999, 12, 31, 23, 59, tzinfo=UTC),
               due_at=datetime(9999, 12, 31, tzinfo=UTC))
    assert time_problem(op) == "unrepresentable_time"
    assert due_work(op, at(0)) == Wait(datetime(9999, 12, 31, tzinfo=UTC))
    assert time_problem(state(E.PENDING)) is None and time_problem(state(E.AMBIGUOUS)) is None


states = st.builds(
    State, execution=st.sampled_from(list(E)), settlement=st.sampled_from(list(S)),
    approval=st.sampled_from([APPROVAL_NOT_REQUIRED, APPROVAL_REQUIRED]), cancel_requested=st.booleans(),
    possibly_applied=st.booleans(),
    due_at=st.integers(0, 200).map(at), lease_expires_at=st.none() | st.integers(0, 200).map(at),
    budget_wait_until=st.none() | st.integers(0, 200).map(at), settlement_due_at=st.none() | st.integers(0, 200).map(at),
    follow=st.sampled_from([None, "poll", "callback", "wait"]), follow_until=st.none() | st.integers(100, 400).map(at),
    remote_overdue=st.booleans(), cancel_refused=st.booleans(),
    write_refused=st.sampled_from([None, "claim", "outcome"]),
)


@given(op=states, seconds=st.integers(-10, 300))
def test_wait_until_is_due_at_and_nothing_is_due_before_it(op: State, seconds: int) -> None:
    assume((op.settlement is S.NONE) == (op.execution not in TERMINAL))  # the states an operation can be in
    work, when = due_work(op, at(seconds)), due_at(op)
    if when is None or at(seconds) < when:
        assert work == Wait(when)
    else:
        assert not isinstance(work, Wait)
    if isinstance(work, (Claim, Reclaim)):  # the slot pre-filter never hides a claim
        assert may_need_egress(op.execution, op.settlement, op.cancel_requested)


# ---------------------------------------------------------------------------- after an attempt

POLICY = RetryPolicy(max_attempts=3, base_backoff_seconds=1.0, max_backoff_seconds=60.0, jitter=0.0)


class NoJitter:
    def random(self) -> float:
        return 0.0


class FullJitter:
    def random(self) -> float:
        return 1.0


RNG = NoJitter()
OK = Succeeded(status_code=200)
ACCEPTED = Accepted(remote_id="r-1", status_code=202)
REFUSED = Failed(FailureCategory.CONNECT, retryable=True, egress=False)
THROTTLED = Failed(FailureCategory.THROTTLED, retryable=True, retry_after=30.0)
REJECTED = Failed(FailureCategory.REJECTED, retryable=False, status_code=422)
LOST = Ambiguous(reason="read_timeout")

M = DeliveryMode
RETRY_LOST = Retry(at=at(2), category=FailureCategory.TIMEOUT, reason="read_timeout", possibly_applied=True)

# (outcome, mode, attempts used) -> decision, for every mode and both sides of the budget.
DECIDE_TABLE = [
    *[(OK, m, 1, Record(OK)) for m in M],
    *[(ACCEPTED, m, 1, Record(ACCEPTED)) for m in M],
    *[(REJECTED, m, 1, Record(REJECTED)) for m in M],
    *[(REFUSED, m, 1, Retry(at=at(1), category=FailureCategory.CONNECT, reason="connect", possibly_applied=False))
      for m in M],
    *[(REFUSED, m, 3, GiveUp(last_attempt_possibly_applied=False)) for m in M],
    *[(THROTTLED, m, 1, Retry(at=at(30), category=FailureCategory.THROTTLED, reason="throttled",
                              possibly_applied=False)) for m in M],
    (LOST, M.IDEMPOTENT, 2, RETRY_LOST),
    (LOST, M.READ_ONLY, 2, RETRY_LOST),
    (LOST, M.IDEMPOTENT, 3, GiveUp(last_attempt_possibly_applied=True)),
    (LOST, M.READ_ONLY, 3, GiveUp(last_attempt_possibly_applied=True)),
    (LOST, M.RECOVERABLE_REMOTE_ID, 1, Lookup()),
    (LOST, M.RECOVERABLE_REMOTE_ID, 3, Lookup()),
    (LOST, M.NON_IDEMPOTENT, 1, Record(LOST)),
    (LOST, M.CALLBACK, 1, AwaitCallback("read_timeout")),
]


@pytest.mark.parametrize(("outcome", "mode", "attempts", "expected"), DECIDE_TABLE)
def test_decide_table(outcome, mode: DeliveryMode, attempts: int, expected) -> None:
    assert decide(outcome=outcome, mode=mode, policy=POLICY, attempts=attempts, now=T0, rng=RNG) == expected


def test_after_a_lookup_a_lost_response_is_recorded_not_looked_up_again() -> None:
    assert decide(outcome=LOST, mode=M.RECOVERABLE_REMOTE_ID, policy=POLICY, attempts=1, now=T0, rng=RNG,
                  after_lookup=True) == Record(LOST)


@pytest.mark.parametrize(("found", "attempts", "expected"), [
    (None, 1, Retry(at=at(1), category=FailureCategory.TIMEOUT, reason="provider did not receive it",
                    possibly_applied=False, detail="provider did not receive it")),
    (None, 3, GiveUp(last_attempt_possibly_applied=False, detail="provider did not receive it")),
    (OK, 1, Record(OK)),
    (LOST, 1, Record(LOST)),  # the lookup itself failed: stay honest, ambiguous
    # A lookup that could not be made says nothing about the attempt (found by the simulator).
    (Failed(FailureCategory.CONNECT, retryable=True, egress=False, detail="refused"), 1,
     Record(Ambiguous(reason="lookup_failed", category=FailureCategory.CONNECT, detail="refused"))),
])
def test_after_lookup_table(found, attempts: int, expected) -> None:
    assert after_lookup(found=found, policy=POLICY, attempts=attempts, now=T0, rng=RNG) == expected


@pytest.mark.parametrize(("attempt", "rng", "seconds"), [
    (0, RNG, 1.0), (1, RNG, 1.0), (2, RNG, 2.0), (3, RNG, 4.0), (6, RNG, 32.0), (7, RNG, 60.0), (50, RNG, 60.0),
    (3, FullJitter(), 4.0 * 0.8),
])
def test_backoff_table(attempt: int, rng, seconds: float) -> None:
    policy = RetryPolicy(max_attempts=5, base_backoff_seconds=1.0, max_backoff_seconds=60.0, jitter=0.2)
    assert backoff_seconds(policy, attempt, rng) == pytest.approx(seconds)


@pytest.mark.parametrize("hint", [float("inf"), 1e308])
def test_a_retry_that_cannot_be_scheduled_records_the_outcome(hint: float) -> None:
    # Not GiveUp: attempts remain, so BudgetExhausted would be refused and the outcome lost.
    late = datetime.max.replace(tzinfo=UTC) - timedelta(milliseconds=500)  # not even the 1 s backoff fits
    assert decide(outcome=THROTTLED, mode=M.IDEMPOTENT, policy=POLICY, attempts=1, now=late, rng=RNG) == Record(THROTTLED)
    unbounded = Failed(FailureCategory.THROTTLED, retryable=True, egress=False, retry_after=hint)
    assert decide(outcome=unbounded, mode=M.NON_IDEMPOTENT, policy=POLICY, attempts=1, now=T0,
                  rng=RNG) == Record(unbounded)
    assert decide(outcome=LOST, mode=M.IDEMPOTENT, policy=POLICY, attempts=1, now=late, rng=RNG) == Record(LOST)


@pytest.mark.parametrize(("used", "max_tries", "expected"), [
    (0, 3, RetrySettlement(at(1))), (1, 3, RetrySettlement(at(2))), (2, 3, BlockSettlement()),
    (0, 1, BlockSettlement()),
])
def test_settlement_failure_table(used: int, max_tries: int, expected) -> None:
    assert after_settlement_failure(tries_used=used, max_tries=max_tries, backoff_seconds=1.0, now=T0) == expected
