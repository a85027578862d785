"""The ``Operation`` aggregate: one authorized external effect, event-sourced.

Each public method is a command: it checks the transition (``ledger.lifecycle``), the caller's
fencing epoch and the time it is given, then records one past-tense event whose ``apply`` only
assigns (STYLE rule 1). No method reads the wall clock: ``now`` is passed in, UTC-aware.
Source: docs/adr/0001-operation-lifecycle.md; DESIGN §4.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any, Mapping
from uuid import UUID

from eventsourcing.domain import Aggregate, OriginatorIDError, OriginatorVersionError

from ledger import decisions, lifecycle
from ledger.clock import require_utc
from ledger.declarations import DeliveryMode, Integration
from ledger.facts import FactKind, storable_fact, storable_fact_or_none
from ledger.errors import (
    AttemptBudgetExceededError,
    IllegalTransitionError,
    InvalidArgumentError,
    LeaseExpiredError,
    StaleEpochError,
)
from ledger.identity import Source, fingerprint, operation_id
from ledger.intents import check_intent, check_payload, require_principal
from ledger.modes import rules_for
from ledger.outcomes import FailureCategory
from ledger.status import (
    APPROVAL_DENIED,
    APPROVAL_GRANTED,
    APPROVAL_NOT_REQUIRED,
    APPROVAL_REQUIRED,
    OUTCOME_STATES,
    TERMINAL_EXECUTION_STATES,
    ExecutionState,
    SettlementState,
    Status,
    derive_status,
)
from ledger.time_limits import require_intent_times, require_later

E = ExecutionState
S = SettlementState


RESOLUTIONS_FOR_AMBIGUOUS = ("succeeded", "failed", "retry", "abandon")
RESOLUTIONS_FOR_BLOCKED = ("retry_settlement", "abandon")

# By value: calling the enum costs a microsecond per fold, a dict lookup a twentieth of that
# (an unknown value still goes through the enum, for its error).
_DELIVERY_MODES = {mode.value: mode for mode in DeliveryMode}

LEASE_TAKEOVERS_FOR_ATTENTION = 3
"""After this many reclaims of an expired lease the operation is shown on the attention queue."""


class Operation(Aggregate):
    """One authorized external effect (DESIGN §3 'operation').

    Build with :meth:`intend`; never with the constructor. Reading attributes is free; changing
    state goes through a command method, which raises :class:`IllegalTransitionError`,
    :class:`StaleEpochError`, :class:`LeaseExpiredError` or
    :class:`AttemptBudgetExceededError` on a command the lifecycle does not allow.
    """

    # ------------------------------------------------------------------ events (facts)

    class Event(Aggregate.Event):
        """Base of every ledger event. ``timestamp`` is the injected ``now`` (UTC)."""

        def mutate(self, aggregate: Operation | None) -> Operation | None:
            # The library's ``CanMutateAggregate.mutate``: the same checks, errors and steps, on
            # the aggregate's fields rather than through its properties (0.87 against 0.63 µs
            # a fold, timeit; every event a projection or a command applies passes here).
            assert aggregate is not None
            if self.originator_id != aggregate._id:
                raise OriginatorIDError(self.originator_id, aggregate._id)
            next_version = aggregate._version + 1
            if self.originator_version != next_version:
                raise OriginatorVersionError(self.originator_version, next_version)
            self.apply(aggregate)
            aggregate._version = next_version
            aggregate._modified_on = self.timestamp
            return aggregate

    class Intended(Event, Aggregate.Created):
        """The operation was authorized, co-committed with the source entity's event."""

        tenant: str
        principal: str
        traceparent: str | None
        integration_name: str
        integration_version: int
        integration_digest: str
        code_digest: str
        delivery_mode: str
        max_attempts: int
        deadlines: dict[str, float]
        settlement_max_attempts: int
        requires_approval: bool
        payload: dict[str, Any]
        target: str | None
        fingerprint: str
        source_entity_type: str
        source_entity_id: UUID
        source_entity_version: int
        effect_index: int

        def apply(self, op: Operation) -> None:
            op.tenant = self.tenant
            op.principal = self.principal
            op.traceparent = self.traceparent
            op.integration_name = self.integration_name
            op.integration_version = self.integration_version
            op.integration_digest = self.integration_digest
            op.code_digest = self.code_digest
            op.delivery_mode = _DELIVERY_MODES.get(self.delivery_mode) or DeliveryMode(self.delivery_mode)
            op.max_attempts = self.max_attempts
            op.deadlines = dict(self.deadlines)
            op.settlement_max_attempts = self.settlement_max_attempts
            op.payload = dict(self.payload)
            op.target = self.target
            op.fingerprint = self.fingerprint
            op.source = Source(
                tenant=self.tenant,
                entity_type=self.source_entity_type,
                entity_id=self.source_entity_id,
                entity_version=self.source_entity_version,
                effect_index=self.effect_index,
            )
            op.approval = APPROVAL_REQUIRED if self.requires_approval else APPROVAL_NOT_REQUIRED
            op.execution = E.PENDING
            op.settlement = S.NONE
            op.state_entered_at = self.timestamp
            op.due_at = self.timestamp
            op.epoch = 0
            op.worker_id = None
            op.lease_expires_at = None
            op.attempts = 0
            op.open_attempt_id = None
            op.last_attempt_id = None
            op.possibly_applied = False
            op.remote_id = None
            op.remote_status = None
            op.callback_ids = set()
            op.cancel_requested = False
            op.cancel_reason = None
            op.failure = None
            op.last_retry_reason = None
            op.ambiguity_reason = None
            op.excerpt = ""
            op.settlement_attempts = 0
            op.settlement_due_at = None
            op.settlement_error = None
            op.settled_entity_version = None
            op.disposition = None
            op.lease_takeovers = 0
            op.resolution = None

        def mutate(self, aggregate: Operation | None) -> Operation:
            # The library's ``Created.mutate`` matches the event's fields to the parameters of
            # ``__base_init__`` and ``__init__`` by signature inspection on every call, a third
            # of a projection's folding time. ``Operation.__init__`` takes nothing, so these
            # are the same steps without the inspection.
            assert aggregate is None
            op = Operation.__new__(Operation)
            op.__base_init__(self.originator_id, self.originator_version, self.timestamp)
            self.apply(op)
            return op

    class ApprovalGranted(Event):
        principal: str

        def apply(self, op: Operation) -> None:
            op.approval = APPROVAL_GRANTED

    class ApprovalDenied(Event):
        principal: str
        reason: str

        def apply(self, op: Operation) -> None:
            op.approval = APPROVAL_DENIED
            op._end_failed(self.timestamp, FailureCategory.APPROVAL_DENIED, self.reason)

    class Claimed(Event):
        epoch: int
        worker_id: str
        lease_expires_at: datetime
        takeover: bool

        def apply(self, op: Operation) -> None:
            op.epoch = self.epoch
            op.worker_id = self.worker_id
            op.lease_expires_at = self.lease_expires_at
            if self.takeover:
                op.lease_takeovers += 1
            if op.execution is E.PENDING:
                op.execution = E.CLAIMED
                op.state_entered_at = self.timestamp

    class LeaseRenewed(Event):
        epoch: int
        lease_expires_at: datetime

        def apply(self, op: Operation) -> None:
            op.lease_expires_at = self.lease_expires_at

    class AttemptStarted(Event):
        epoch: int
        attempt_id: UUID
        attempt_number: int
        request_fingerprint: str

        def apply(self, op: Operation) -> None:
            op.execution = E.DISPATCHING
            op.state_entered_at = self.timestamp
            op.attempts = self.attempt_number
            op.open_attempt_id = self.attempt_id
            op.last_attempt_id = self.attempt_id

    class Accepted(Event):
        epoch: int
        attempt_id: UUID
        remote_id: str
        status_code: int | None
        excerpt: str

        def apply(self, op: Operation) -> None:
            op.execution = E.ACCEPTED
            op.state_entered_at = self.timestamp
            op.remote_id = self.remote_id
            op.open_attempt_id = None
            # Accepted work waits for its result; nobody holds it until a poller claims it.
            op.worker_id = None
            op.lease_expires_at = None
            op.possibly_applied = True
            op.excerpt = self.excerpt

    class RemoteStatusObserved(Event):
        epoch: int
        remote_status: str

        def apply(self, op: Operation) -> None:
            op.remote_status = self.remote_status

    class CallbackReceived(Event):
        callback_id: str
        outcome: str  # "succeeded", "failed" or "progress"
        remote_status: str | None
        detail: str

        def apply(self, op: Operation) -> None:
            op.callback_ids = op.callback_ids | {self.callback_id}  # assign-only: copies share values
            if self.remote_status is not None:
                op.remote_status = self.remote_status
            if self.outcome == "succeeded":
                op._reach_outcome(E.SUCCEEDED, self.timestamp)
            elif self.outcome == "failed":
                op._end_failed(self.timestamp, FailureCategory.REMOTE_FAILED, self.detail)

    class Succeeded(Event):
        epoch: int
        attempt_id: UUID | None
        status_code: int | None
        remote_id: str | None
        excerpt: str

        def apply(self, op: Operation) -> None:
            if self.remote_id is not None:
                op.remote_id = self.remote_id
            op.excerpt = self.excerpt
            op._reach_outcome(E.SUCCEEDED, self.timestamp)

    class Failed(Event):
        epoch: int
        attempt_id: UUID | None
        category: str
        retryable: bool
        status_code: int | None
        detail: str

        def apply(self, op: Operation) -> None:
            op._end_failed(self.timestamp, self.category, self.detail, retryable=self.retryable,
                           status_code=self.status_code)

    class Ambiguous(Event):
        epoch: int
        attempt_id: UUID | None
        reason: str
        status_code: int | None
        detail: str

        def apply(self, op: Operation) -> None:
            op.excerpt = self.detail
            op._end_ambiguous(self.timestamp, self.reason)

    class RetryScheduled(Event):
        epoch: int
        attempt_id: UUID
        retry_at: datetime
        category: str
        reason: str
        possibly_applied: bool

        def apply(self, op: Operation) -> None:
            op.execution = E.PENDING
            op.state_entered_at = self.timestamp
            op.due_at = self.retry_at
            op.worker_id = None
            op.lease_expires_at = None
            op.open_attempt_id = None
            op.possibly_applied = op.possibly_applied or self.possibly_applied
            # Why the last attempt is being retried; ``failure`` is kept for a terminal failure.
            op.last_retry_reason = f"{self.category}: {self.reason}"

    class CancelRequested(Event):
        principal: str
        reason: str

        def apply(self, op: Operation) -> None:
            op.cancel_requested = True
            op.cancel_reason = self.reason
            op.due_at = self.timestamp

    class Cancelled(Event):
        epoch: int | None
        reason: str

        def apply(self, op: Operation) -> None:
            op._reach_outcome(E.CANCELLED, self.timestamp)
            op.disposition = "cancelled"

    class CancelFailed(Event):
        epoch: int
        reason: str

        def apply(self, op: Operation) -> None:
            op.cancel_reason = f"cancel failed: {self.reason}"

    class DeadlineExceeded(Event):
        state: str
        deadline_at: datetime
        ambiguous: bool

        def apply(self, op: Operation) -> None:
            if self.ambiguous:
                op._end_ambiguous(self.timestamp, "deadline_exceeded")
            else:
                op._end_failed(self.timestamp, FailureCategory.DEADLINE, f"deadline of state {self.state} passed")

    class BudgetExhausted(Event):
        epoch: int
        attempts: int
        ambiguous: bool

        def apply(self, op: Operation) -> None:
            if self.ambiguous:
                op._end_ambiguous(self.timestamp, "budget_exhausted")
            else:
                op._end_failed(self.timestamp, FailureCategory.ATTEMPTS_EXHAUSTED, f"{self.attempts} attempts used")

    class SettlementFailed(Event):
        error: str
        retry_at: datetime

        def apply(self, op: Operation) -> None:
            op.settlement_attempts += 1
            op.settlement_error = self.error
            op.settlement_due_at = self.retry_at

    class SettlementBlocked(Event):
        reason: str

        def apply(self, op: Operation) -> None:
            op.settlement_attempts += 1
            op.settlement = S.BLOCKED
            op.settlement_error = self.reason
            op.settlement_due_at = None

    class Settled(Event):
        entity_version: int
        principal: str
        traceparent: str | None

        def apply(self, op: Operation) -> None:
            op.settlement = S.SETTLED
            op.settled_entity_version = self.entity_version
            op.settlement_due_at = None
            if op.disposition is None:
                op.disposition = "settled"

    class Resolved(Event):
        principal: str
        resolution: str
        evidence: str

        def apply(self, op: Operation) -> None:
            op.resolution = self.resolution
            if self.resolution == "succeeded":
                op._reach_outcome(E.SUCCEEDED, self.timestamp)
                op.disposition = "resolved"
            elif self.resolution == "failed":
                op._end_failed(self.timestamp, FailureCategory.OPERATOR, self.evidence)
                op.disposition = "resolved"
            elif self.resolution == "retry":
                op.execution = E.PENDING
                op.state_entered_at = self.timestamp
                op.due_at = self.timestamp
                op.worker_id = None
                op.lease_expires_at = None
                op.open_attempt_id = None
                op.possibly_applied = False
                op.ambiguity_reason = None
            elif self.resolution == "retry_settlement":
                op.settlement = S.PENDING
                op.settlement_attempts = 0
                op.settlement_due_at = self.timestamp
            elif self.resolution == "abandon":
                op.disposition = "abandoned"

    # Instance attributes, assigned by ``Intended.apply`` (listed for readers and type checkers).
    tenant: str
    principal: str
    traceparent: str | None
    integration_name: str
    integration_version: int
    integration_digest: str
    code_digest: str
    delivery_mode: DeliveryMode
    max_attempts: int
    deadlines: dict[str, float]
    settlement_max_attempts: int
    payload: dict[str, Any]
    target: str | None
    fingerprint: str
    source: Source
    approval: str
    execution: ExecutionState
    settlement: SettlementState
    state_entered_at: datetime
    due_at: datetime
    epoch: int
    worker_id: str | None
    lease_expires_at: datetime | None
    attempts: int
    open_attempt_id: UUID | None
    last_attempt_id: UUID | None
    possibly_applied: bool
    remote_id: str | None
    remote_status: str | None
    callback_ids: set[str]
    cancel_requested: bool
    cancel_reason: str | None
    failure: dict[str, Any] | None
    last_retry_reason: str | None
    ambiguity_reason: str | None
    excerpt: str
    settlement_attempts: int
    settlement_due_at: datetime | None
    settlement_error: str | None
    settled_entity_version: int | None
    disposition: str | None
    lease_takeovers: int
    resolution: str | None

    def __init__(self) -> None:
        # State is assigned by ``Intended.apply``; the annotations above only document it.
        pass

    def _end_failed(self, at: datetime, category: FailureCategory | str, detail: str, *,
                    retryable: bool = False, status_code: int | None = None) -> None:
        # Called only from ``apply`` bodies.
        self.failure = {"category": str(category), "retryable": retryable,
                        "detail": detail, "status_code": status_code}
        self._reach_outcome(E.FAILED, at)

    def _end_ambiguous(self, at: datetime, reason: str) -> None:
        # Called only from ``apply`` bodies.
        self.ambiguity_reason = reason
        self.possibly_applied = True
        self._reach_outcome(E.AMBIGUOUS, at)

    def _reach_outcome(self, state: ExecutionState, at: datetime) -> None:
        # Called only from ``apply`` bodies: assigns the outcome and opens settlement.
        self.execution = state
        self.state_entered_at = at
        self.open_attempt_id = None
        self.worker_id = None
        self.lease_expires_at = None
        if state in TERMINAL_EXECUTION_STATES:
            if self.settlement_max_attempts > 0:
                self.settlement = S.PENDING
                self.settlement_due_at = at
            else:
                self.settlement = S.NOT_REQUIRED

    # ------------------------------------------------------------------ constructor command

    @classmethod
    def intend(
        cls,
        *,
        now: datetime,
        integration: Integration,
        source: Source,
        payload: Mapping[str, Any],
        target: str | None = None,
        principal: str = "system",
        traceparent: str | None = None,
        code_digest: str = "",
    ) -> Operation:
        """Record the intent of an external effect (event ``Intended``).

        Args:
            now: UTC-aware instant of the intent.
            integration: the validated declaration the operation runs under.
            source: the authorizing transition (entity version *after* it).
            payload: plain JSON data; every key must be classified by the declaration, and
                secret fields must hold ``secretref:NAME`` references, never values.
            target: the URL to call; defaults to the declaration's ``endpoint``.
            principal: who authorized it (user or service id).
            traceparent: the W3C trace context header of the authorizing request, if any.
            code_digest: a digest of the module or code that issued the intent.

        Returns:
            The new operation, with one pending ``Intended`` event. Its id is derived
            (``ledger.identity.operation_id``).

        Raises:
            PayloadError: an unclassified field, a secret value instead of a reference, or
                data that is not plain JSON.
            NaiveDatetimeError: ``now`` has no timezone.
        """
        now = require_utc(now, "now")
        check_payload(integration, payload)
        target = target if target is not None else integration.endpoint
        check_intent(integration, source, target, principal, traceparent)
        require_intent_times(integration, now)
        return cls._create(
            cls.Intended,
            id=operation_id(source, integration.name),
            timestamp=now,
            tenant=source.tenant,
            principal=principal,
            traceparent=traceparent,
            integration_name=integration.name,
            integration_version=integration.version,
            integration_digest=integration.digest(),
            code_digest=code_digest,
            delivery_mode=integration.delivery_mode.value,
            max_attempts=integration.retry.max_attempts,
            deadlines=dict(integration.deadline_seconds),
            settlement_max_attempts=integration.settlement.max_attempts if integration.settlement else 0,
            requires_approval=integration.requires_approval,
            payload=dict(payload),
            target=target,
            fingerprint=fingerprint(integration, payload, target),
            source_entity_type=source.entity_type,
            source_entity_id=source.entity_id,
            source_entity_version=source.entity_version,
            effect_index=source.effect_index,
        )

    def detached_copy(self) -> Operation:
        """A copy of this operation's current state that later commands on either do not change.

        Cheap (no reload, no replay): ``apply`` methods only ever assign new values, never change
        a stored value in place, so the copy may share them. Pending events are not copied.
        Used to hand a worker's committed states to the status projection in the same process.
        """
        clone = copy.copy(self)
        clone._pending_events = []
        return clone

    # ------------------------------------------------------------------ derived views

    @property
    def status(self) -> Status:
        """The projection status derived from execution and settlement state."""
        return derive_status(self.execution, self.settlement)

    @property
    def deadline_at(self) -> datetime | None:
        """When the current execution state's deadline passes (UTC), or None where none applies
        (``ledger.decisions.deadline_at``)."""
        return decisions.deadline_at(self)

    @property
    def next_due_at(self) -> datetime | None:
        """The earliest instant (UTC) at which a worker has something to do, or None
        (``ledger.decisions.due_at``)."""
        return decisions.due_at(self)

    @property
    def attention(self) -> str | None:
        """Why automated progress stopped and an operator is needed, or None (DESIGN §3)."""
        if self.disposition == "abandoned":
            return None
        if self.execution is E.AMBIGUOUS:
            return "budget_exhausted" if self.ambiguity_reason == "budget_exhausted" else "ambiguous"
        if self.settlement is S.BLOCKED:
            return "settlement_blocked"
        if self.execution is E.FAILED and self.settlement is S.NOT_REQUIRED:
            return "dead_letter"
        if self.execution in lifecycle.ACTIVE and self.lease_takeovers >= LEASE_TAKEOVERS_FOR_ATTENTION:
            return "lease_expired_repeatedly"
        return decisions.time_problem(self)

    def lease_expired(self, now: datetime) -> bool:
        """True when no worker holds a live lease at ``now`` (UTC)."""
        return self.lease_expires_at is None or require_utc(now) >= self.lease_expires_at

    # ------------------------------------------------------------------ guards

    def _allow(self, command: str, detail: str = "") -> None:
        if self.execution not in lifecycle.BY_EXECUTION[command]:
            raise IllegalTransitionError(command, self.execution.value, detail)

    def _allow_settlement(self, command: str) -> None:
        if self.settlement not in lifecycle.BY_SETTLEMENT[command]:
            raise IllegalTransitionError(command, f"settlement {self.settlement.value}")

    def _fence(self, epoch: int) -> None:
        if epoch != self.epoch:
            raise StaleEpochError(self.id, epoch, self.epoch)

    def _attempt(self, attempt_id: UUID | None, command: str) -> None:
        if attempt_id is not None and attempt_id != self.last_attempt_id:
            raise IllegalTransitionError(command, self.execution.value,
                                         f"attempt {attempt_id} is not the operation's latest attempt")

    # ------------------------------------------------------------------ commands

    def grant_approval(self, *, now: datetime, principal: str) -> None:
        """Record an approver's consent (``ApprovalGranted``). Approval is checked before egress.

        Raises:
            IllegalTransitionError: not pending, or approval not required or already decided.
        """
        self._allow("grant_approval")
        require_principal(principal)
        if self.approval != APPROVAL_REQUIRED:
            raise IllegalTransitionError("grant_approval", self.execution.value, f"approval is {self.approval}")
        self.trigger_event(self.ApprovalGranted, timestamp=require_utc(now), principal=principal)

    def deny_approval(self, *, now: datetime, principal: str, reason: str) -> None:
        """Record an approver's refusal (``ApprovalDenied``): the operation fails, nothing sent.

        Raises:
            IllegalTransitionError: not pending, or approval not required or already decided.
        """
        self._allow("deny_approval")
        require_principal(principal)
        if self.approval != APPROVAL_REQUIRED:
            raise IllegalTransitionError("deny_approval", self.execution.value, f"approval is {self.approval}")
        self.trigger_event(self.ApprovalDenied, timestamp=require_utc(now), principal=principal, reason=reason)

    def claim(self, *, now: datetime, worker_id: str, lease_seconds: float) -> int:
        """Take the operation under a lease with a new fencing epoch (``Claimed``).

        A pending operation is claimable once due and approved; a claimed, dispatching or
        accepted one only after its lease expired (recovery takes it over).

        Args:
            now: UTC-aware instant.
            worker_id: the claiming worker's id.
            lease_seconds: lease length in seconds (> 0).

        Returns:
            The new epoch (previous + 1): the worker's fencing token.

        Raises:
            IllegalTransitionError: terminal or ambiguous, not due, awaiting approval, or the
                current lease is still live.
        """
        now = require_utc(now)
        self._allow("claim")
        if lease_seconds <= 0:
            raise InvalidArgumentError("lease_seconds must be > 0")
        takeover = False
        if self.execution is E.PENDING:
            if self.approval == APPROVAL_REQUIRED:
                raise IllegalTransitionError("claim", "pending", "awaiting approval")
            if now < self.due_at:
                raise IllegalTransitionError("claim", "pending", f"not due until {self.due_at.isoformat()}")
        else:
            if not self.lease_expired(now):
                raise IllegalTransitionError("claim", self.execution.value, "the lease is still held")
            takeover = self.execution is not E.ACCEPTED or self.lease_expires_at is not None
        epoch = self.epoch + 1
        require_later(now, self.deadlines[E.CLAIMED.value], "deadlines.claimed")
        self.trigger_event(
            self.Claimed, timestamp=now, epoch=epoch, worker_id=worker_id,
            lease_expires_at=require_later(now, lease_seconds, "lease_seconds"), takeover=takeover,
        )
        return epoch

    def renew_lease(self, *, epoch: int, now: datetime, lease_seconds: float) -> None:
        """Extend the lease (``LeaseRenewed``). A lease that already ran out cannot be renewed:
        the worker must stop before egress (DESIGN §7).

        Raises:
            StaleEpochError, LeaseExpiredError, IllegalTransitionError.
        """
        now = require_utc(now)
        self._allow("renew_lease")
        self._fence(epoch)
        if lease_seconds <= 0:
            raise InvalidArgumentError("lease_seconds must be > 0")
        if self.lease_expired(now):
            raise LeaseExpiredError(f"operation {self.id}: lease expired at {self.lease_expires_at}")
        self.trigger_event(self.LeaseRenewed, timestamp=now, epoch=epoch,
                           lease_expires_at=require_later(now, lease_seconds, "lease_seconds"))

    def start_attempt(self, *, epoch: int, now: datetime, attempt_id: UUID, request_fingerprint: str) -> int:
        """Record an attempt before any byte leaves (``AttemptStarted``). Attempts count here,
        so a worker killed during every attempt still exhausts the budget (invariant 2).

        Returns:
            The attempt number (1-based).

        Raises:
            StaleEpochError, LeaseExpiredError, AttemptBudgetExceededError,
            IllegalTransitionError (not claimed, cancel requested, or approval missing).
        """
        now = require_utc(now)
        self._allow("start_attempt")
        self._fence(epoch)
        if self.lease_expired(now):
            raise LeaseExpiredError(f"operation {self.id}: lease expired at {self.lease_expires_at}")
        if self.cancel_requested:
            raise IllegalTransitionError("start_attempt", "claimed", "cancellation was requested")
        if self.approval in (APPROVAL_REQUIRED, APPROVAL_DENIED):
            raise IllegalTransitionError("start_attempt", "claimed", f"approval is {self.approval}")
        if self.attempts >= self.max_attempts:
            raise AttemptBudgetExceededError(
                f"operation {self.id}: {self.attempts} of {self.max_attempts} attempts used")
        number = self.attempts + 1
        self.trigger_event(self.AttemptStarted, timestamp=now, epoch=epoch, attempt_id=attempt_id,
                           attempt_number=number, request_fingerprint=request_fingerprint)
        return number

    def accept(self, *, epoch: int, now: datetime, attempt_id: UUID, remote_id: str,
               status_code: int | None = None, excerpt: str = "") -> None:
        """Record that the provider accepted the work as remote operation ``remote_id``."""
        self._allow("accept")
        self._fence(epoch)
        self._attempt(attempt_id, "accept")
        if not remote_id:
            raise InvalidArgumentError("remote_id must be non-empty")
        self.trigger_event(self.Accepted, timestamp=require_utc(now), epoch=epoch, attempt_id=attempt_id,
                           remote_id=storable_fact(remote_id, FactKind.REMOTE_ID), status_code=status_code,
                           excerpt=storable_fact(excerpt, FactKind.EXCERPT))

    def observe_remote_status(self, *, epoch: int, now: datetime, remote_status: str) -> bool:
        """Record a polled remote status, only when it changed (``RemoteStatusObserved``).

        Returns:
            True when an event was recorded; False when the status was unchanged.
        """
        self._allow("observe_remote_status")
        self._fence(epoch)
        remote_status = storable_fact(remote_status, FactKind.STATUS)
        if remote_status == self.remote_status:
            return False
        self.trigger_event(self.RemoteStatusObserved, timestamp=require_utc(now), epoch=epoch,
                           remote_status=remote_status)
        return True

    def receive_callback(self, *, now: datetime, callback_id: str, outcome: str,
                         remote_status: str | None = None, detail: str = "") -> bool:
        """Record an *authenticated* callback (``CallbackReceived``). Authentication is the
        inbound adapter's job; a duplicate ``callback_id`` changes nothing (invariant 4).

        Args:
            outcome: ``succeeded``, ``failed`` or ``progress``.

        Returns:
            True when recorded; False for a duplicate, or a late callback agreeing with the
            outcome already recorded.

        Raises:
            IllegalTransitionError: a late callback contradicting a recorded outcome, or a state
                that expects no callback.
        """
        if outcome not in ("succeeded", "failed", "progress"):
            raise InvalidArgumentError("outcome must be 'succeeded', 'failed' or 'progress'")
        if callback_id in self.callback_ids:
            return False
        if self.execution in OUTCOME_STATES and outcome == self.execution.value:
            return False
        self._allow("receive_callback")
        self.trigger_event(self.CallbackReceived, timestamp=require_utc(now), callback_id=callback_id,
                           outcome=outcome, remote_status=storable_fact_or_none(remote_status, FactKind.STATUS),
                           detail=storable_fact(detail, FactKind.DETAIL))
        return True

    def succeed(self, *, epoch: int, now: datetime, attempt_id: UUID | None = None,
                status_code: int | None = None, remote_id: str | None = None, excerpt: str = "") -> None:
        """Record that the effect happened (``Succeeded``)."""
        self._allow("succeed")
        self._fence(epoch)
        self._attempt(attempt_id, "succeed")
        self.trigger_event(self.Succeeded, timestamp=require_utc(now), epoch=epoch, attempt_id=attempt_id,
                           status_code=status_code, remote_id=storable_fact_or_none(remote_id, FactKind.REMOTE_ID),
                           excerpt=storable_fact(excerpt, FactKind.EXCERPT))

    def fail(self, *, epoch: int, now: datetime, category: FailureCategory | str, retryable: bool,
             attempt_id: UUID | None = None, status_code: int | None = None, detail: str = "") -> None:
        """Record that the effect is known not to have happened or known to have failed."""
        self._allow("fail")
        self._fence(epoch)
        self._attempt(attempt_id, "fail")
        self.trigger_event(self.Failed, timestamp=require_utc(now), epoch=epoch, attempt_id=attempt_id,
                           category=FailureCategory(category).value, retryable=retryable,
                           status_code=status_code, detail=storable_fact(detail, FactKind.DETAIL))

    def mark_ambiguous(self, *, epoch: int, now: datetime, reason: str, attempt_id: UUID | None = None,
                       status_code: int | None = None, detail: str = "") -> None:
        """Record that egress may have happened and nothing says whether it applied."""
        self._allow("mark_ambiguous")
        self._fence(epoch)
        self._attempt(attempt_id, "mark_ambiguous")
        self.trigger_event(self.Ambiguous, timestamp=require_utc(now), epoch=epoch, attempt_id=attempt_id,
                           reason=storable_fact(reason, FactKind.REASON), status_code=status_code,
                           detail=storable_fact(detail, FactKind.DETAIL))

    def schedule_retry(self, *, epoch: int, now: datetime, attempt_id: UUID, retry_at: datetime,
                       category: FailureCategory | str, reason: str, possibly_applied: bool) -> None:
        """Close the open attempt and schedule another (``RetryScheduled``).

        Args:
            possibly_applied: whether the closed attempt may have applied (egress happened and
                the response was lost). Refused in ``non_idempotent`` mode (invariant 3).

        Raises:
            AttemptBudgetExceededError: no attempt left; record ``exhaust_budget`` instead.
            IllegalTransitionError: not dispatching, or a non-idempotent retry of a possibly
                applied attempt.
        """
        now = require_utc(now)
        retry_at = require_utc(retry_at, "retry_at")
        self._allow("schedule_retry")
        self._fence(epoch)
        self._attempt(attempt_id, "schedule_retry")
        if possibly_applied and not rules_for(self.delivery_mode).retries_possibly_applied:
            raise IllegalTransitionError(
                "schedule_retry", self.execution.value,
                f"{self.delivery_mode.value} mode never retries an attempt that may have applied")
        if self.attempts >= self.max_attempts:
            raise AttemptBudgetExceededError(
                f"operation {self.id}: {self.attempts} of {self.max_attempts} attempts used")
        require_later(now, self.deadlines[E.PENDING.value], "deadlines.pending")
        self.trigger_event(self.RetryScheduled, timestamp=now, epoch=epoch, attempt_id=attempt_id,
                           retry_at=max(retry_at, now), category=FailureCategory(category).value,
                           reason=storable_fact(reason, FactKind.REASON), possibly_applied=possibly_applied)

    def request_cancel(self, *, now: datetime, principal: str, reason: str = "") -> bool:
        """Ask for cancellation (``CancelRequested``). Workers honour it before egress, and ask
        the provider to cancel accepted work.

        Returns:
            True when recorded; False when cancellation was already requested.
        """
        self._allow("request_cancel")
        require_principal(principal)
        if self.cancel_requested:
            return False
        self.trigger_event(self.CancelRequested, timestamp=require_utc(now), principal=principal, reason=reason)
        return True

    def cancel(self, *, now: datetime, epoch: int | None = None, reason: str = "") -> None:
        """Record the cancellation (``Cancelled``). Needs a prior ``request_cancel``.

        A leased operation is cancelled by its lease holder (``epoch``); an unleased pending one
        by anyone (``epoch=None``).
        """
        now = require_utc(now)
        self._allow("cancel")
        if not self.cancel_requested:
            raise IllegalTransitionError("cancel", self.execution.value, "cancellation was not requested")
        if epoch is None:
            if not (self.execution is E.PENDING or self.lease_expired(now)):
                raise IllegalTransitionError("cancel", self.execution.value, "a worker holds the lease")
        else:
            self._fence(epoch)
        self.trigger_event(self.Cancelled, timestamp=now, epoch=epoch, reason=reason or self.cancel_reason or "")

    def cancel_failed(self, *, epoch: int, now: datetime, reason: str) -> None:
        """Record that the provider refused or could not cancel (``CancelFailed``)."""
        self._allow("cancel_failed")
        self._fence(epoch)
        if not self.cancel_requested:
            raise IllegalTransitionError("cancel_failed", self.execution.value, "cancellation was not requested")
        self.trigger_event(self.CancelFailed, timestamp=require_utc(now), epoch=epoch,
                           reason=storable_fact(reason, FactKind.DETAIL))

    def exceed_deadline(self, *, now: datetime) -> None:
        """Record that the current state's deadline passed (``DeadlineExceeded``).

        The outcome is ``failed`` when no attempt may have applied, else ``ambiguous``.

        Raises:
            IllegalTransitionError: no deadline applies, or it has not passed at ``now``.
        """
        now = require_utc(now)
        self._allow("exceed_deadline")
        deadline = self.deadline_at
        assert deadline is not None
        if now < deadline:
            raise IllegalTransitionError("exceed_deadline", self.execution.value,
                                         f"the deadline is {deadline.isoformat()}")
        ambiguous = self.possibly_applied or self.execution in (E.DISPATCHING, E.ACCEPTED)
        self.trigger_event(self.DeadlineExceeded, timestamp=now, state=self.execution.value,
                           deadline_at=deadline, ambiguous=ambiguous)

    def exhaust_budget(self, *, epoch: int, now: datetime, last_attempt_possibly_applied: bool) -> None:
        """Record that no attempt is left (``BudgetExhausted``): ``failed`` when every attempt is
        known not to have applied, else ``ambiguous``.

        Raises:
            IllegalTransitionError: attempts remain.
        """
        self._allow("exhaust_budget")
        self._fence(epoch)
        if self.attempts < self.max_attempts:
            raise IllegalTransitionError("exhaust_budget", self.execution.value,
                                         f"{self.max_attempts - self.attempts} attempts remain")
        ambiguous = self.possibly_applied or last_attempt_possibly_applied
        self.trigger_event(self.BudgetExhausted, timestamp=require_utc(now), epoch=epoch,
                           attempts=self.attempts, ambiguous=ambiguous)

    def fail_settlement(self, *, now: datetime, error: str, retry_at: datetime) -> None:
        """Record a failed settlement action, to retry at ``retry_at`` without new egress.

        Raises:
            IllegalTransitionError: settlement not pending, or the last try is used (record
                ``block_settlement`` instead).
        """
        self._allow_settlement("fail_settlement")
        if self.settlement_attempts + 1 >= self.settlement_max_attempts:
            raise IllegalTransitionError("fail_settlement", "settlement pending",
                                         "settlement tries are used up; block it instead")
        self.trigger_event(self.SettlementFailed, timestamp=require_utc(now), error=error,
                           retry_at=require_utc(retry_at, "retry_at"))

    def block_settlement(self, *, now: datetime, reason: str) -> None:
        """Stop settling and ask an operator (``SettlementBlocked``)."""
        self._allow_settlement("block_settlement")
        self.trigger_event(self.SettlementBlocked, timestamp=require_utc(now), reason=reason)

    def settle(self, *, now: datetime, entity_version: int, principal: str | None = None,
               traceparent: str | None = None) -> None:
        """Record that the entity action ran (``Settled``); save it with the entity in one
        ``save()``. A second settlement raises (invariant 4)."""
        self._allow_settlement("settle")
        self.trigger_event(self.Settled, timestamp=require_utc(now), entity_version=entity_version,
                           principal=principal or self.principal,
                           traceparent=traceparent if traceparent is not None else self.traceparent)

    def resolve(self, *, now: datetime, principal: str, resolution: str, evidence: str) -> None:
        """Record an operator's decision with evidence (``Resolved``).

        Args:
            resolution: for an ambiguous operation ``succeeded``, ``failed``, ``retry`` (the
                operator asserts nothing applied; needs an attempt left) or ``abandon``; for a
                blocked settlement ``retry_settlement`` or ``abandon``.
            evidence: what the operator checked (required, shown on the timeline).

        Raises:
            IllegalTransitionError: nothing to resolve, or a resolution that does not fit.
        """
        if not evidence.strip():
            raise InvalidArgumentError("evidence is required: say what was checked")
        require_principal(principal)
        if resolution not in RESOLUTIONS_FOR_AMBIGUOUS + RESOLUTIONS_FOR_BLOCKED:
            raise InvalidArgumentError(
                f"unknown resolution {resolution!r}: one of "
                f"{', '.join(dict.fromkeys(RESOLUTIONS_FOR_AMBIGUOUS + RESOLUTIONS_FOR_BLOCKED))}")
        if self.disposition == "abandoned":
            raise IllegalTransitionError("resolve", self.status.value, "already abandoned")
        if self.execution in lifecycle.RESOLVABLE_EXECUTION:
            allowed = RESOLUTIONS_FOR_AMBIGUOUS
        elif self.settlement in lifecycle.RESOLVABLE_SETTLEMENT:
            allowed = RESOLUTIONS_FOR_BLOCKED
        else:
            raise IllegalTransitionError("resolve", self.status.value, "nothing to resolve")
        if resolution not in allowed:
            raise IllegalTransitionError("resolve", self.status.value,
                                         f"resolution must be one of {', '.join(allowed)}")
        if resolution == "retry" and self.attempts >= self.max_attempts:
            raise IllegalTransitionError("resolve", self.status.value, "no attempt left to retry with")
        self.trigger_event(self.Resolved, timestamp=require_utc(now), principal=principal,
                           resolution=resolution, evidence=evidence)
