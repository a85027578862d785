"""Pure decisions: what is due for an operation now, what a claim of it does next, and (re-
exported from ``ledger.outcome_decisions`` and ``ledger.settlement_decisions``) what to record
after an attempt or a settlement try (DESIGN §5, §7; STYLE rules 4 and 16).

Every question of the form "what should happen to this operation" is answered here, once, from
values: the executor services, the aggregate's command guards, ``Operation.next_due_at``, the
status projection's ``next_due_at``, the protocol model (``docs/model/``) and the docs ask these
functions and never restate them with status comparisons. Each takes ``now`` (UTC-aware) and,
where jitter applies, the random source as arguments, so the deterministic simulator and the
table tests drive them directly.

Source: DESIGN §4-§7; docs/adr/0002-executor-services.md (the decision table); issue 33 item 1.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from ledger.modes import AfterLostResponse, rules_for
from ledger.operation_state import OperationState
from ledger.outcome_decisions import (
    AwaitCallback,
    Decision,
    GiveUp,
    Lookup,
    RandomSource,
    Record,
    Retry,
    after_lookup,
    backoff_seconds,
    decide,
)
from ledger.settlement_decisions import (
    BlockSettlement,
    OutcomeRef,
    RecordedOutcome,
    RetrySettlement,
    SettlementDecision,
    SettlementSource,
    after_settlement_failure,
    settlement_fence_problem,
    settlement_order,
    settlement_try_left,
)
from ledger.status import ACTIVE_STATES, APPROVAL_REQUIRED, ExecutionState, SettlementState
from ledger.time_limits import later

__all__ = [
    "CANCEL", "CLAIM", "POLL", "RECLAIM", "SETTLE", "AwaitCallback", "BlockSettlement", "Cancel", "Claim",
    "ClaimStep", "Decision", "ExceedDeadline", "GiveUp", "Lookup", "MarkRemoteUnknown", "OperationState",
    "OutcomeRef", "Poll", "RandomSource", "Reclaim", "Record", "RecordedOutcome", "Retry", "RetrySettlement",
    "Settle", "SettlementDecision", "SettlementSource", "Wait", "Work", "after_lookup", "after_settlement_failure",
    "attempts_left", "backoff_seconds", "cancels_unsent", "claim_makes_call", "claim_plan", "claimable_at",
    "deadline_at", "deadline_ends_ambiguous", "decide", "due_at", "due_work", "late_callback_contradicts",
    "may_need_egress", "needs_follower", "settlement_fence_problem", "settlement_order", "settlement_try_left",
    "time_problem",
]

E = ExecutionState


# ---------------------------------------------------------------------------- due work

@dataclass(frozen=True, slots=True)
class Claim:
    """Pending, approved and due: claim it under a new epoch and start an attempt."""


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Claimed or dispatching, no lease held (it lapsed, or its holder gave it up with a budget
    wait) and no recorded call budget wait left: take it under a new epoch (recovery); an open
    attempt is then decided by the delivery mode (:func:`decide` with ``worker_lost``)."""


@dataclass(frozen=True, slots=True)
class Settle:
    """A terminal outcome waits for its settlement action, and its (re)try time has come."""


@dataclass(frozen=True, slots=True)
class ExceedDeadline:
    """The current execution state's deadline passed at ``deadline_at`` (UTC)."""

    deadline_at: datetime


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancellation was requested and no worker holds the operation: record ``Cancelled``."""


@dataclass(frozen=True, slots=True)
class Poll:
    """Accepted, and no worker holds it while it needs one (it is followed by polling, or a
    cancellation waits to be sent): claim it under a poll lease (``executors.polling``)."""


@dataclass(frozen=True, slots=True)
class MarkRemoteUnknown:
    """The ``accepted`` deadline passed at ``deadline_at`` (UTC) with no answer from the
    provider: record ``RemoteOverdue`` (attention ``remote_unknown``), never an outcome; the
    operation is followed until its hard limit (issue 12 item 2)."""

    deadline_at: datetime


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do now. ``until``: the earliest instant (UTC) something will be, or None when
    only an outside event (an operator, a callback, an approval) can move the operation."""

    until: datetime | None


Work = Claim | Reclaim | Settle | ExceedDeadline | MarkRemoteUnknown | Cancel | Poll | Wait

CLAIM, RECLAIM, SETTLE, CANCEL, POLL = Claim(), Reclaim(), Settle(), Cancel(), Poll()

FOLLOW_POLL = "poll"
"""``Operation.follow`` of accepted work that is polled (``ledger.modes.Follow.POLL``)."""


def deadline_at(op: OperationState) -> datetime | None:
    """When the current execution state's deadline passes (UTC), or None where none applies
    (terminal states; ambiguous, which waits for an operator by design; and a deadline that
    cannot be represented, which :func:`time_problem` reports).

    Source: DESIGN §4 invariant 6.
    """
    if op.execution not in ACTIVE_STATES:
        return None
    if op.execution is E.ACCEPTED and op.remote_overdue and op.follow_until is not None:
        return op.follow_until  # past the accepted deadline: the declared hard limit bounds it
    return later(op.state_entered_at, op.deadlines[op.execution.value])


def time_problem(op: OperationState) -> str | None:
    """Why an active operation's deadline cannot be computed, or None when it can.

    An intent stored before declarations were bounded (or by other code) may hold a deadline
    past year 9999; such an operation has no deadline, so it is shown on the attention queue
    instead of silently waiting forever (invariant 6).
    """
    if op.execution in ACTIVE_STATES and deadline_at(op) is None:
        return "unrepresentable_time"
    return None


def due_at(op: OperationState) -> datetime | None:
    """The earliest instant (UTC) at which :func:`due_work` is not ``Wait``, or None if only an
    outside event can make it so. ``Operation.next_due_at`` and the status row read this.
    A write the store refused for the operation (``WriteRefused``) leaves it to an operator
    (issue 35): nothing is due until one acts."""
    if op.write_refused is not None:
        return None
    if op.settlement is SettlementState.PENDING:
        return op.settlement_due_at
    if op.execution not in ACTIVE_STATES:
        return None
    candidates = [t for t in (deadline_at(op), _start_at(op)) if t is not None]
    return min(candidates) if candidates else None


def _start_at(op: OperationState) -> datetime | None:
    # When a worker may take the operation (claim, reclaim, poll or cancel), deadlines aside.
    if op.execution is E.PENDING and cancels_unsent(op):
        return op.due_at  # cancelled without a claim, approved or not
    if op.execution is E.ACCEPTED:
        if not needs_follower(op):
            return None  # waits for its callback, its deadline or an operator
        return claimable_at(op) or op.state_entered_at  # a poller's lease, or at once
    return claimable_at(op)


def claimable_at(op: OperationState) -> datetime | None:
    """From when (UTC) ``Operation.claim`` accepts a claim of ``op``.

    Pending: its ``due_at`` once approved or not awaiting approval (a ``BudgetWaited`` moves
    ``due_at`` to the next window); None while it awaits its approval. Claimed, dispatching or
    accepted: the later of the lease's expiry and a recorded call budget wait's end
    (``BudgetWaited``, issue 14 item 1; a holder that gave its lease up with a wait leaves only
    the wait); None when neither holds it (claimable at once). The claim command's guard and
    :func:`due_work` both read this, so what is due and what may be claimed cannot disagree.
    Pure.

    Args:
        op: the operation's current state (an active one; others are never claimable).

    Returns:
        The instant, or None as above.

    Source: DESIGN §7; docs/adr/0001-operation-lifecycle.md (``claim``).
    """
    if op.execution is E.PENDING:
        return None if op.approval == APPROVAL_REQUIRED else op.due_at
    times = [t for t in (op.lease_expires_at, op.budget_wait_until) if t is not None]
    return max(times) if times else None


def cancels_unsent(op: OperationState) -> bool:
    """Whether a pending operation's cancellation is recorded as ``Cancelled`` without egress:
    it was requested and no earlier attempt may have applied. When one may have (a retry after a
    lost response, in a mode whose retries are safe), the retry is sent anyway with the same key
    to learn what the provider did: a success stands ("completed despite cancel"), accepted work
    is then cancelled at the provider. Recording ``Cancelled`` would claim an effect that may
    exist did not (ADR 0004)."""
    return op.cancel_requested and not op.possibly_applied


def needs_follower(op: OperationState) -> bool:
    """Whether accepted work needs a worker holding it: it is followed by polling, or a
    cancellation was requested and not yet refused (it is sent to the provider)."""
    return op.follow == FOLLOW_POLL or (op.cancel_requested and not op.cancel_refused)


def due_work(op: OperationState, now: datetime) -> Work:
    """What is due for ``op`` at ``now`` (UTC): the one rule every executor service obeys.

    Precedence, first match wins: settle a due settlement; record a passed deadline (for
    accepted work followed under a hard limit, the first pass of the ``accepted`` deadline is
    ``MarkRemoteUnknown``, the hard limit ``ExceedDeadline``); cancel an unleased pending
    operation whose cancellation was requested (:func:`cancels_unsent`); claim a pending,
    approved, due one (due: ``due_at``, which a ``BudgetWaited`` moves to the next window); poll
    accepted work no live poll lease holds; reclaim a claimed or dispatching one whose lease
    expired (or was given up) and whose recorded call budget wait, if any, is over; otherwise
    wait.

    Args:
        op: the operation's current state.
        now: UTC-aware instant.

    Returns:
        ``Claim``, ``Reclaim``, ``Settle``, ``ExceedDeadline``, ``MarkRemoteUnknown``,
        ``Cancel``, ``Poll`` or ``Wait(until)``;
        ``Wait.until`` equals :func:`due_at` whenever the result is ``Wait``.

    Source: DESIGN §7; docs/adr/0002-executor-services.md (the table tests render it).
    """
    when = due_at(op)
    if when is None or now < when:
        return Wait(when)
    if op.settlement is SettlementState.PENDING:
        return SETTLE
    deadline = deadline_at(op)
    if deadline is not None and deadline <= now:
        if op.execution is E.ACCEPTED and op.follow_until is not None and not op.remote_overdue:
            return MarkRemoteUnknown(deadline)
        return ExceedDeadline(deadline)
    if op.execution is E.PENDING:
        return CANCEL if cancels_unsent(op) else CLAIM
    if op.execution is E.ACCEPTED:
        return POLL
    return RECLAIM


# ---------------------------------------------------------------------------- what a claim does

class ClaimStep(enum.Enum):
    """What a claim of an operation does next, in the same commit (:func:`claim_plan`)."""

    SEND = "send"
    """Start an attempt (``AttemptStarted``) and hand its call to egress after the commit."""
    RECOVER = "recover"
    """Decide the attempt a previous holder left open, by delivery mode (``decide`` with
    ``worker_lost``): a retry, a recorded outcome, or a lookup (a call) first."""
    CANCEL = "cancel"
    """Record ``Cancelled``: cancellation was requested and nothing sent may have applied."""
    EXHAUST = "exhaust"
    """Record ``BudgetExhausted``: no attempt is left."""
    FOLLOW = "follow"
    """Hold accepted work under a poll lease (``executors.polling``); no call at the claim."""
    NOTHING = "nothing"
    """Not claimable in this state (terminal, ambiguous): the claim itself is refused."""


def attempts_left(op: OperationState) -> int:
    """Attempts the operation may still start (its recorded ``max_attempts`` less those
    started; never below 0). Source: DESIGN §4 invariant 2."""
    return max(0, op.max_attempts - op.attempts)


def claim_plan(op: OperationState) -> ClaimStep:
    """What a claim of ``op`` does next, decided on the state the claim change sees (the claim
    service, its call budget and the model all ask this; none restates it).

    First match wins: accepted work is followed; an open attempt (dispatching) is recovered,
    cancellation requested or not (the attempt may have applied: the mode decides); an unsent
    cancellation (:func:`cancels_unsent`) is recorded; with no attempt left the budget is
    exhausted; otherwise an attempt is sent. Pure.

    Args:
        op: the operation's current state.

    Returns:
        A :class:`ClaimStep`.

    Source: DESIGN §7; docs/adr/0002-executor-services.md; issue 33 item 1.
    """
    if op.execution is E.ACCEPTED:
        return ClaimStep.FOLLOW
    if op.execution is E.DISPATCHING:
        return ClaimStep.RECOVER
    if op.execution not in (E.PENDING, E.CLAIMED):
        return ClaimStep.NOTHING
    if cancels_unsent(op):
        return ClaimStep.CANCEL
    if attempts_left(op) == 0:
        return ClaimStep.EXHAUST
    return ClaimStep.SEND


def claim_makes_call(op: OperationState) -> bool:
    """Whether the claim of ``op`` makes a call to the provider, which a call budget must
    cover: a send, or the lookup that recovering an open attempt of a ``look_up`` mode makes
    (``ledger.modes``). Pure. Source: issue 14 item 1."""
    step = claim_plan(op)
    if step is ClaimStep.RECOVER:
        return rules_for(op.delivery_mode).after_lost_response is AfterLostResponse.LOOK_UP
    return step is ClaimStep.SEND


def deadline_ends_ambiguous(op: OperationState) -> bool:
    """Whether a passed deadline ends ``op`` ambiguous rather than failed: an attempt is open
    (dispatching), the provider has the work (accepted), or an earlier attempt may have applied.
    Source: docs/adr/0001-operation-lifecycle.md ("Deadlines, state by state")."""
    return op.possibly_applied or op.execution in (E.DISPATCHING, E.ACCEPTED)


def may_need_egress(execution: ExecutionState, settlement: SettlementState, cancel_requested: bool) -> bool:
    """Whether due work in this state may take an egress slot (``Claim`` or ``Reclaim``).

    Lets a worker choose which due rows to load before loading them: rows for which this is
    False (settlements, accepted work) never wait for a free slot. A superset: a row for which
    it is True may still turn out to be a deadline or a cancellation.
    """
    if settlement is not SettlementState.NONE:
        return False
    # Every pending row may need one: a cancelled one is usually recorded without egress, but
    # one whose earlier attempt may have applied is sent again (``cancels_unsent``), and the row
    # does not say which. A leased one is reclaimed first (its holder may be gone), which takes
    # a slot. Accepted work is claimed for polling without a slot: its polls ask for one when due.
    del cancel_requested  # kept in the signature: callers pass what the row holds
    return execution in (E.CLAIMED, E.DISPATCHING, E.PENDING)


# ---------------------------------------------------------------------------- late callbacks

def late_callback_contradicts(recorded: ExecutionState, reported: str) -> bool:
    """Whether a callback reporting ``reported`` after the outcome ``recorded`` contradicts it,
    and so is recorded as ``LateObservationRecorded`` and goes to attention.

    ``succeeded`` contradicts every recorded outcome but ``succeeded``; ``failed`` contradicts
    ``succeeded`` and ``ambiguous`` (which says the effect may have happened); ``failed`` after
    ``failed`` or ``cancelled`` agrees (no effect either way); ``progress`` never contradicts.

    Args:
        recorded: the operation's execution state, one of ``OUTCOME_STATES``.
        reported: the callback's outcome: ``succeeded``, ``failed`` or ``progress``.

    Returns:
        True when the callback must be recorded as a late observation.

    Source: issue 12 item 3 ("recorded as a late observation fact when it contradicts the
    recorded outcome"); docs/adr/0005-callback-authentication.md.
    """
    if reported == "succeeded":
        return recorded is not E.SUCCEEDED
    if reported == "failed":
        return recorded in (E.SUCCEEDED, E.AMBIGUOUS)
    return False
