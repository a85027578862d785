"""Pure decisions: what is due for an operation now, and what to record after an attempt
(DESIGN §5, §7; STYLE rules 4 and 16).

Every question of the form "what should happen to this operation" is answered here, once, from
values: the executor services, ``Operation.next_due_at``, the status projection's ``next_due_at``
and the docs ask these functions and never restate them with status comparisons. Each takes
``now`` (UTC-aware) and, where jitter applies, the random source as arguments, so the
deterministic simulator and the table tests drive them directly.

Source: DESIGN §4-§7; docs/adr/0002-executor-services.md (the decision table).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Protocol
from uuid import UUID

from tenacity.wait import wait_exponential

from ledger.declarations import DeliveryMode, RetryPolicy
from ledger.identity import Source
from ledger.modes import AfterLostResponse, rules_for
from ledger.outcomes import Accepted, Ambiguous, Failed, FailureCategory, Outcome, Succeeded
from ledger.status import ACTIVE_STATES, APPROVAL_REQUIRED, ExecutionState, SettlementState
from ledger.time_limits import later

E = ExecutionState


class RandomSource(Protocol):
    """The part of ``random.Random`` that jitter needs (the simulator passes its seeded one)."""

    def random(self) -> float: ...


class OperationState(Protocol):
    """The fields of an operation that :func:`due_work` reads (``ledger.operation.Operation``)."""

    execution: ExecutionState
    settlement: SettlementState
    approval: str
    cancel_requested: bool
    possibly_applied: bool
    state_entered_at: datetime
    deadlines: dict[str, float]
    due_at: datetime
    lease_expires_at: datetime | None
    budget_wait_until: datetime | None
    settlement_due_at: datetime | None
    follow: str | None
    follow_until: datetime | None
    remote_overdue: bool
    cancel_refused: bool
    write_refused: str | None


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
    # When a worker may take the operation (claim, reclaim or cancel), deadlines aside.
    if op.execution is E.PENDING:
        if cancels_unsent(op) or op.approval != APPROVAL_REQUIRED:
            return op.due_at
        return None
    if op.execution is E.ACCEPTED:
        if not needs_follower(op):
            return None  # waits for its callback, its deadline or an operator
        return op.lease_expires_at or op.state_entered_at  # a poller's lease, or at once
    # Claimed or dispatching: once no lease is held and a recorded call budget wait
    # (``BudgetWaited``, issue 14 item 1) is over; a holder that gave its lease up with a wait
    # leaves only the wait.
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


# ---------------------------------------------------------------------------- after an attempt

@dataclass(frozen=True, slots=True)
class Record:
    """Record ``outcome`` as the attempt's result (a terminal or accepted fact)."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Retry:
    """Close the attempt and schedule another at ``at`` (UTC), keeping the closed attempt's
    evidence: its HTTP status (if any) and its bounded, redacted detail (issue 34 item 5)."""

    at: datetime
    category: FailureCategory
    reason: str
    possibly_applied: bool
    status_code: int | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class GiveUp:
    """No attempt left: record ``BudgetExhausted``, with the last attempt's status and detail."""

    last_attempt_possibly_applied: bool
    status_code: int | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Lookup:
    """Ask the provider whether it received the operation, then decide again."""


@dataclass(frozen=True, slots=True)
class AwaitCallback:
    """The provider reports by calling us: treat the request as accepted and wait for the
    authenticated callback until the ``accepted`` deadline (DESIGN §5, ``callback`` mode)."""

    reason: str


Decision = Record | Retry | GiveUp | Lookup | AwaitCallback


def backoff_seconds(policy: RetryPolicy, attempt_number: int, rng: RandomSource) -> float:
    """Delay before attempt ``attempt_number + 1``, seconds.

    Exponential (``base * 2**(n-1)``, capped at ``max_backoff_seconds``, via tenacity), then
    reduced by up to ``jitter`` of itself so that retries of many operations spread out.

    Args:
        policy: the declared retry policy.
        attempt_number: attempts used so far (1-based; values below 1 count as 1).
        rng: the random source for jitter (required, so the simulator's seed decides it).
    """
    curve = wait_exponential(multiplier=policy.base_backoff_seconds, max=policy.max_backoff_seconds)
    delay = curve(SimpleNamespace(attempt_number=max(1, attempt_number)))  # type: ignore[arg-type]
    return float(delay) * (1.0 - policy.jitter * rng.random())


def decide(*, outcome: Outcome, mode: DeliveryMode, policy: RetryPolicy, attempts: int, now: datetime,
           rng: RandomSource, after_lookup: bool = False) -> Decision:
    """Decide what to record for one attempt's outcome.

    Args:
        outcome: what the adapter (or a lookup) returned; a worker lost mid-attempt is
            ``Ambiguous(reason="worker_lost")``.
        mode: the integration's delivery mode (its rules: ``ledger.modes``).
        policy: the retry policy (budget and backoff).
        attempts: attempts used so far, including this one.
        now: UTC-aware instant.
        rng: random source for jitter.
        after_lookup: the outcome came from a ``recoverable_remote_id`` lookup.

    Returns:
        ``Record``, ``Retry``, ``GiveUp``, ``Lookup`` or ``AwaitCallback``. Source: DESIGN §5.
    """
    if isinstance(outcome, (Succeeded, Accepted)):
        return Record(outcome)
    if isinstance(outcome, Failed):
        if not outcome.retryable:
            return Record(outcome)
        return _retry_or_give_up(policy, attempts, now, rng, outcome, outcome.detail or outcome.category.value,
                                 possibly_applied=False, hint=outcome.retry_after)
    assert isinstance(outcome, Ambiguous)
    rule = rules_for(mode).after_lost_response
    if rule is AfterLostResponse.RETRY:
        # The provider dedupes on the stable key (or there is no effect): the same key is safe.
        return _retry_or_give_up(policy, attempts, now, rng, outcome, outcome.reason,
                                 possibly_applied=True, hint=None)
    if rule is AfterLostResponse.LOOK_UP and not after_lookup:
        return Lookup()
    if rule is AfterLostResponse.AWAIT_CALLBACK:
        return AwaitCallback(outcome.reason)
    return Record(outcome)


def after_lookup(*, found: Outcome | None, policy: RetryPolicy, attempts: int, now: datetime,
                 rng: RandomSource) -> Decision:
    """Decide from a ``recoverable_remote_id`` lookup.

    Args:
        found: the provider's answer: ``None`` means it never received the operation, so
            another attempt is safe; a ``Failed`` means the lookup could not be made and is
            recorded as ``Ambiguous(lookup_failed)``; anything else is recorded as found (an
            ``Ambiguous`` when the lookup itself failed).
        policy, attempts, now, rng: as :func:`decide`.
    """
    if found is None:
        not_received = Failed(FailureCategory.TIMEOUT, retryable=True, detail="provider did not receive it")
        return _retry_or_give_up(policy, attempts, now, rng, not_received, not_received.detail,
                                 possibly_applied=False, hint=None)
    if isinstance(found, Failed):
        # A lookup that could not be made (refused, not sent) says nothing about the attempt,
        # which may have applied: ambiguous, never a terminal failure.
        return Record(Ambiguous(reason="lookup_failed", category=found.category, status_code=found.status_code,
                                detail=found.detail))
    return Record(found)


def _retry_or_give_up(policy: RetryPolicy, attempts: int, now: datetime, rng: RandomSource,
                      outcome: Failed | Ambiguous, reason: str, *, possibly_applied: bool,
                      hint: float | None) -> Decision:
    if attempts >= policy.max_attempts:
        return GiveUp(last_attempt_possibly_applied=possibly_applied, status_code=outcome.status_code,
                      detail=outcome.detail)
    delay = backoff_seconds(policy, attempts, rng)
    if hint is not None:
        delay = max(delay, hint)  # Retry-After says when the provider can take it again
    at = later(now, delay)
    if at is None:
        # No retry can be scheduled (a Retry-After beyond year 9999): the attempt's outcome is
        # the operation's, recorded as it came (failed, or ambiguous if it may have applied).
        return Record(outcome)
    return Retry(at=at, category=outcome.category, reason=reason, possibly_applied=possibly_applied,
                 status_code=outcome.status_code, detail=outcome.detail)


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


# ---------------------------------------------------------------------------- settlement

class SettlementSource(Protocol):
    """The fields of an operation that :func:`settlement_order` reads."""

    @property
    def id(self) -> UUID: ...

    @property
    def source(self) -> Source: ...


def settlement_order(op: SettlementSource) -> tuple[int, UUID]:
    """Which of one entity's settlements goes first when several are due at once: the lowest
    effect index (the order the transition intended its effects in), then the operation id.
    Settlements of one entity are applied one per batch (they would conflict on its version),
    so this fixes the order however many workers there are and however they crashed.

    Source: issue 17 ("deterministic recovery"); docs/adr/0002-executor-services.md.
    """
    return op.source.effect_index, op.id


@dataclass(frozen=True, slots=True)
class RetrySettlement:
    """Record ``SettlementFailed`` and try the action again at ``at`` (UTC), without egress."""

    at: datetime


@dataclass(frozen=True, slots=True)
class BlockSettlement:
    """Record ``SettlementBlocked``: the tries are used up; an operator decides."""


SettlementDecision = RetrySettlement | BlockSettlement


def after_settlement_failure(*, tries_used: int, max_tries: int, backoff_seconds: float,
                             now: datetime) -> SettlementDecision:
    """Decide what follows a failed settlement action.

    Args:
        tries_used: settlement tries already recorded as failed, before this one.
        max_tries: the declaration's ``settlement.max_attempts``.
        backoff_seconds: the declaration's ``settlement.backoff_seconds`` (doubled per try).
        now: UTC-aware instant.

    Returns:
        ``BlockSettlement`` once this failure uses the last try, else ``RetrySettlement``.

    Source: DESIGN §7 ("settlement retries with backoff, and ends in SettlementBlocked").
    """
    if tries_used + 1 >= max_tries:
        return BlockSettlement()
    at = later(now, backoff_seconds * (2 ** tries_used))
    return BlockSettlement() if at is None else RetrySettlement(at)


@dataclass(frozen=True, slots=True)
class OutcomeRef:
    """The outcome a settler settles: the attempt whose outcome it read (None when the
    operation ended without an attempt: cancelled, denied or past its deadline while pending)
    and the fencing epoch under which that outcome was recorded."""

    attempt_id: UUID | None
    epoch: int | None


class RecordedOutcome(Protocol):
    """The fields of an operation that :func:`settlement_fence_problem` reads."""

    outcome_attempt_id: UUID | None
    outcome_epoch: int | None


def settlement_fence_problem(op: RecordedOutcome, settles: OutcomeRef) -> str | None:
    """Why a settler may not settle ``settles`` on ``op``, or None when it may. Pure.

    A settlement applies one recorded outcome: the one of the attempt the ledger recorded it
    for, under the epoch it was recorded in. A settler that read another (a zombie worker
    holding a copy from before a takeover, a retried change on a fresh load that now holds a
    different outcome) is refused before the entity's action runs, so its entity is never
    changed.

    Args:
        op: the operation as stored now.
        settles: the outcome the settler read.

    Returns:
        None, or the reason (its epoch is stale; its attempt is not the recorded outcome's).

    Source: issue 32 item 3 ("fenced settlement"); DESIGN §4 invariants 4 and 5.
    """
    if settles.epoch != op.outcome_epoch:
        return (f"it settles the outcome read under epoch {settles.epoch}, but the recorded outcome is of "
                f"epoch {op.outcome_epoch} (stale)")
    if settles.attempt_id != op.outcome_attempt_id:
        return (f"it settles the outcome of attempt {settles.attempt_id}, but the recorded outcome is of "
                f"attempt {op.outcome_attempt_id}")
    return None
