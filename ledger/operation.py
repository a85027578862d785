"""The ``Operation`` aggregate: one authorized external effect, event-sourced.

This module holds the facts: the events (nested here, since their topics are stored), whose
``apply`` only assigns (STYLE rule 1), the state they build and the views derived from it. The
commands that check and record them are ``ledger.commands.OperationCommands``, which
``Operation`` inherits; what is due is ``ledger.decisions``.
Source: docs/adr/0001-operation-lifecycle.md; DESIGN §4.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, OriginatorIDError, OriginatorVersionError
from eventsourcing.utils import get_topic

from ledger import decisions, lifecycle
from ledger.clock import require_utc
from ledger.commands import OperationCommands
from ledger.declarations import DeliveryMode
from ledger.errors import CorruptRecordError
from ledger.identity import Source
from ledger.outcomes import FailureCategory
from ledger.status import (
    APPROVAL_DENIED,
    APPROVAL_GRANTED,
    APPROVAL_NOT_REQUIRED,
    APPROVAL_REQUIRED,
    TERMINAL_EXECUTION_STATES,
    ExecutionState,
    SettlementState,
    Status,
    derive_status,
)

E = ExecutionState
S = SettlementState

# By value: calling the enum costs a microsecond per fold, a dict lookup a twentieth of that
# (an unknown value still goes through the enum, for its error).
_DELIVERY_MODES = {mode.value: mode for mode in DeliveryMode}

LEASE_TAKEOVERS_FOR_ATTENTION = 3
"""After this many reclaims of an expired lease the operation is shown on the attention queue."""


def _without_status_or_detail(state: dict[str, Any]) -> None:
    # Version 1 of RetryScheduled and BudgetExhausted kept neither the attempt's HTTP status
    # nor its detail (issue 34 item 5).
    state["status_code"] = None
    state["detail"] = ""


def _without_settled_outcome(state: dict[str, Any]) -> None:
    # Version 1 of Settled, SettlementFailed and SettlementBlocked did not name the outcome
    # they settled (issue 32 item 3).
    state["attempt_id"] = None
    state["epoch"] = None


class Operation(OperationCommands, Aggregate):
    """One authorized external effect (DESIGN §3 'operation').

    Build with :meth:`intend`; never with the constructor. Reading attributes is free; changing
    state goes through a command method, which raises :class:`IllegalTransitionError`,
    :class:`StaleEpochError`, :class:`LeaseExpiredError` or
    :class:`AttemptBudgetExceededError` on a command the lifecycle does not allow.
    """

    # ------------------------------------------------------------------ events (facts)

    class Event(Aggregate.Event):
        """Base of every ledger event. ``timestamp`` is the injected ``now`` (UTC)."""

        # The library types this generically (TAggregate); ours folds only into an Operation.
        def mutate(self, aggregate: Operation | None) -> Operation | None:  # type: ignore[override]
            # The library's ``CanMutateAggregate.mutate``: the same checks, errors and steps, on
            # the aggregate's fields rather than through its properties (0.87 against 0.63 µs
            # a fold, timeit; every event a projection or a command applies passes here).
            if aggregate is None:  # records before this one are missing from the store
                raise CorruptRecordError(self.originator_id, self.originator_version, get_topic(type(self)),
                                         "the operation's earlier records are missing (its history must start "
                                         "with Intended)")
            if self.originator_id != aggregate._id:
                raise OriginatorIDError(self.originator_id, aggregate._id)
            next_version = aggregate._version + 1
            if self.originator_version != next_version:
                if self.originator_version > next_version:  # a gap: records are missing
                    raise CorruptRecordError(self.originator_id, self.originator_version, get_topic(type(self)),
                                             f"records {next_version} to {self.originator_version - 1} are missing")
                raise OriginatorVersionError(self.originator_version, next_version)
            self.apply(aggregate)
            aggregate._version = next_version
            aggregate._modified_on = self.timestamp
            return aggregate

    class Intended(Event, Aggregate.Created):
        """The operation was authorized, co-committed with the source entity's event.

        Class version 2 added the chain of authority (issue 32 item 4): ``source_action``, the
        name of the entity's event that authorized the intent, and ``on_behalf_of``, the
        delegation chain (each link ``{"principal": ..., "role": ...}``, the principal first
        acted for first); version 1 records upcast with ``""`` and no delegation. Class version 3
        added provenance (issue 31 item 2): ``opledger_version`` and ``opledger_commit``, the
        opledger that recorded it (``ledger.provenance.build_info``); older records upcast with
        ``""`` (not recorded)."""

        class_version = 3
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
        source_action: str
        on_behalf_of: list[dict[str, str]]
        opledger_version: str
        opledger_commit: str

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["source_action"] = ""  # not recorded before issue 32
            state["on_behalf_of"] = []

        @staticmethod
        def upcast_v2_v3(state: dict[str, Any]) -> None:
            state["opledger_version"] = ""  # not recorded before issue 31
            state["opledger_commit"] = ""

        def apply(self, op: Operation) -> None:
            op.tenant = self.tenant
            op.principal = self.principal
            op.source_action = self.source_action
            op.on_behalf_of = [dict(link) for link in self.on_behalf_of]
            op.traceparent = self.traceparent
            op.integration_name = self.integration_name
            op.integration_version = self.integration_version
            op.integration_digest = self.integration_digest
            op.code_digest = self.code_digest
            op.opledger_version = self.opledger_version
            op.opledger_commit = self.opledger_commit
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
            op.callback_signed_at = {}
            op.last_progress = None
            op.late_observation = None
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
            op.settlement_block_code = None
            op.outcome_attempt_id = None
            op.outcome_epoch = None
            op.disposition = None
            op.lease_takeovers = 0
            op.resolution = None
            op.declaration_mismatch = None
            op.approval_fingerprint = None
            op.approval_purpose = None
            op.approval_expires_at = None
            op.approved_by = None
            op.approval_voided = None
            op.budget_wait = None
            op.budget_wait_until = None
            op.follow = None
            op.follow_until = None
            op.remote_overdue = False
            op.cancel_refused = False
            op.write_refused = None
            op.write_refused_error = None

        # As above: the library's generic signature; a creation event always returns the new one.
        def mutate(self, aggregate: Operation | None) -> Operation:  # type: ignore[override]
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
        """An approver consented for ``purpose``, for the operation with ``fingerprint``, until
        ``expires_at`` (``ledger.approvals``)."""

        class_version = 2
        principal: str
        fingerprint: str
        purpose: str
        expires_at: datetime | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            # Approvals recorded before they were bound: honoured for their operation, no expiry.
            state["fingerprint"] = ""
            state["purpose"] = ""
            state["expires_at"] = None

        def apply(self, op: Operation) -> None:
            op.approval = APPROVAL_GRANTED
            op.approval_fingerprint = self.fingerprint
            op.approval_purpose = self.purpose
            op.approval_expires_at = self.expires_at
            op.approved_by = self.principal

    class ApprovalVoided(Event):
        """A granted approval stopped allowing egress before it was used (``reason``:
        ``approval_expired`` or ``approval_fingerprint_mismatch``); the operation waits for a
        new approval."""

        reason: str

        def apply(self, op: Operation) -> None:
            op.approval = APPROVAL_REQUIRED
            op.approval_fingerprint = None
            op.approval_expires_at = None
            op.approval_voided = self.reason

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
            op.declaration_mismatch = None  # only a worker with the recorded declaration claims
            # The wait is over; ``budget_wait`` keeps the scope of the last one (``ops show``).
            op.budget_wait_until = None
            if self.takeover:
                op.lease_takeovers += 1
            if op.execution is E.PENDING:
                op.execution = E.CLAIMED
                op.state_entered_at = self.timestamp

    class DeclarationMismatched(Event):
        """A worker refused the operation: its declaration of the same name and version has
        another digest than the one recorded on ``Intended`` (issue 14 item 5)."""

        worker_id: str
        declared_digest: str

        def apply(self, op: Operation) -> None:
            op.declaration_mismatch = self.declared_digest

    class BudgetWaited(Event):
        """The call budget ``scope`` had no call left in its window: the operation is due again
        at ``until``, when the next window opens (``ledger.budgets``).

        ``epoch`` is None for a wait recorded without a lease (a pending operation, or a
        leased one whose lease lapsed: the reclaim that could not get a call records it instead
        of claiming); otherwise the lease holder recorded it and gave up its lease with it
        (a lookup after a lost response that could not get a call). Class version 2; version 1
        (pending operations only) upcasts with ``epoch`` None.
        """

        class_version = 2
        scope: str
        until: datetime
        epoch: int | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["epoch"] = None  # before leased waits, every wait was a pending operation's

        def apply(self, op: Operation) -> None:
            op.due_at = self.until  # read in pending only; a leased state reads budget_wait_until
            op.budget_wait = self.scope
            op.budget_wait_until = self.until
            if self.epoch is not None:  # the holder released its lease; no takeover follows
                op.worker_id = None
                op.lease_expires_at = None

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
        """The provider accepted the work as remote operation ``remote_id``. ``follow`` says how
        its result will come (``ledger.modes.Follow``); ``follow_until`` is the hard limit on
        waiting for it (UTC; None in records written before polling existed: the ``accepted``
        deadline then ends it, as it always did)."""

        class_version = 2
        epoch: int
        attempt_id: UUID
        remote_id: str
        status_code: int | None
        excerpt: str
        follow: str
        follow_until: datetime | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["follow"] = "wait"
            state["follow_until"] = None

        def apply(self, op: Operation) -> None:
            op.follow = self.follow
            op.follow_until = self.follow_until
            op.remote_overdue = False
            op.execution = E.ACCEPTED
            op.state_entered_at = self.timestamp
            op.remote_id = self.remote_id
            op.open_attempt_id = None
            # Accepted work waits for its result; nobody holds it until a poller claims it.
            op.worker_id = None
            op.lease_expires_at = None
            op.budget_wait_until = None
            op.possibly_applied = True
            op.excerpt = self.excerpt

    class RemoteStatusObserved(Event):
        epoch: int
        remote_status: str

        def apply(self, op: Operation) -> None:
            op.remote_status = self.remote_status

    class RemoteOverdue(Event):
        """The ``accepted`` deadline passed at ``deadline_at`` while the provider had not
        answered: not an outcome (it may still finish). The operation is on the attention queue
        as ``remote_unknown`` and is followed until ``follow_until``."""

        deadline_at: datetime

        def apply(self, op: Operation) -> None:
            op.remote_overdue = True

    class CallbackReceived(Event):
        """An authenticated callback reported on the operation (``ledger.callbacks``).

        Class version 2 added ``attempt_id`` (the attempt it answers) and ``signed_at`` (its
        ``webhook-timestamp``, which tells a replayed message from the provider's re-signed
        retry); version 1 records upcast with both None."""

        class_version = 2
        callback_id: str
        outcome: str  # "succeeded", "failed" or "progress"
        remote_status: str | None
        detail: str
        attempt_id: UUID | None
        signed_at: datetime | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["attempt_id"] = None
            state["signed_at"] = None

        def apply(self, op: Operation) -> None:
            op._remember_callback(self.callback_id, self.signed_at)
            if self.remote_status is not None:
                op.remote_status = self.remote_status
            if self.outcome == "progress":
                op.last_progress = (self.attempt_id, self.remote_status, self.detail)
            if self.outcome == "succeeded":
                op._reach_outcome(E.SUCCEEDED, self.timestamp)
            elif self.outcome == "failed":
                op._end_failed(self.timestamp, FailureCategory.REMOTE_FAILED, self.detail)

    class LateObservationRecorded(Event):
        """An authenticated callback arrived after the operation's outcome was recorded, and
        contradicts it (``ledger.decisions.late_callback_contradicts``). A fact for operators:
        it never changes the outcome or settles; the operation goes on the attention queue as
        ``late_observation`` until an operator resolves or acknowledges it (issue 12 item 3)."""

        callback_id: str
        attempt_id: UUID | None
        signed_at: datetime | None
        outcome: str
        remote_status: str | None
        detail: str
        recorded_outcome: str

        def apply(self, op: Operation) -> None:
            op._remember_callback(self.callback_id, self.signed_at)
            op.late_observation = {"callback_id": self.callback_id, "outcome": self.outcome,
                                   "recorded_outcome": self.recorded_outcome, "remote_status": self.remote_status,
                                   "detail": self.detail}

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
        """An attempt closed and another scheduled. Class version 2 added the closed attempt's
        ``status_code`` and bounded ``detail`` (issue 34 item 5); version 1 records upcast with
        None and ``""``."""

        class_version = 2
        epoch: int
        attempt_id: UUID
        retry_at: datetime
        category: str
        reason: str
        possibly_applied: bool
        status_code: int | None
        detail: str

        upcast_v1_v2 = staticmethod(_without_status_or_detail)

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
            op.write_refused = None  # an operator acted: workers take it again (issue 35)

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
            op.cancel_refused = True

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
        """No attempt left. Class version 2 added the last attempt's ``status_code`` and bounded
        ``detail`` (issue 34 item 5); version 1 records upcast with None and ``""``."""

        class_version = 2
        epoch: int
        attempts: int
        ambiguous: bool
        status_code: int | None
        detail: str

        upcast_v1_v2 = staticmethod(_without_status_or_detail)

        def apply(self, op: Operation) -> None:
            if self.ambiguous:
                op._end_ambiguous(self.timestamp, "budget_exhausted")
            else:
                last = f"; the last answered: {self.detail}" if self.detail else ""
                op._end_failed(self.timestamp, FailureCategory.ATTEMPTS_EXHAUSTED,
                               f"{self.attempts} attempts used{last}", status_code=self.status_code)

    class SettlementFailed(Event):
        """The entity's settlement action raised; tried again at ``retry_at`` without egress.
        Class version 2 added the outcome it tried to settle (``attempt_id``, ``epoch``; issue 32
        item 3); version 1 records upcast with None for both."""

        class_version = 2
        error: str
        retry_at: datetime
        attempt_id: UUID | None
        epoch: int | None

        upcast_v1_v2 = staticmethod(_without_settled_outcome)

        def apply(self, op: Operation) -> None:
            op.settlement_attempts += 1
            op.settlement_error = self.error
            op.settlement_due_at = self.retry_at

    class SettlementBlocked(Event):
        """Settlement stopped; an operator must look. ``code`` names the rule that stopped it
        when one did (``settlement_entity_mismatch``, ``settlement_denied``: the attention
        reason), else ``""`` (the action kept failing, the entity is gone...: attention
        ``settlement_blocked``). Class version 2 added ``code`` and the outcome it was to settle
        (``attempt_id``, ``epoch``; issue 32 items 1-3); version 1 records upcast with ``""`` and
        None."""

        class_version = 2
        reason: str
        code: str
        attempt_id: UUID | None
        epoch: int | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["code"] = ""
            _without_settled_outcome(state)

        def apply(self, op: Operation) -> None:
            op.settlement_attempts += 1
            op.settlement = S.BLOCKED
            op.settlement_block_code = self.code or None
            op.settlement_error = self.reason
            op.settlement_due_at = None

    class Settled(Event):
        """The entity's action ran, saved with the entity in one ``save()``. Class version 2
        added the outcome it settled (``attempt_id``: the attempt whose outcome the ledger
        recorded, None when it ended without one; ``epoch``: the epoch it was recorded under;
        issue 32 item 3); version 1 records upcast with None for both."""

        class_version = 2
        entity_version: int
        principal: str
        traceparent: str | None
        attempt_id: UUID | None
        epoch: int | None

        upcast_v1_v2 = staticmethod(_without_settled_outcome)

        def apply(self, op: Operation) -> None:
            op.settlement = S.SETTLED
            op.settled_entity_version = self.entity_version
            op.settlement_due_at = None
            if op.disposition is None:
                op.disposition = "settled"

    class WriteRefused(Event):
        """The store refused a write for this operation alone, while it accepted others (a
        trigger, a constraint, a row-level security policy; issue 35). ``kind`` says what the
        write was for (``ledger.refusals.WriteKind``), ``error`` what the database said
        (``ledger.refusals.refusal_text``). Workers leave the operation alone (``due_work`` is
        ``Wait(None)``, attention ``write_refused``) until an operator acts (``Resolved``, or
        ``CancelRequested``). ``epoch``: the lease holder's that recorded it, or None."""

        kind: str
        error: str
        epoch: int | None

        def apply(self, op: Operation) -> None:
            op.write_refused = self.kind
            op.write_refused_error = self.error

    class Resolved(Event):
        principal: str
        resolution: str
        evidence: str

        def apply(self, op: Operation) -> None:
            op.write_refused = None  # whatever the operator decided, workers may go on
            op.resolution = self.resolution
            op.late_observation = None  # the operator decided with the late observation in view
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
                op.settlement_block_code = None
                op.settlement_attempts = 0
                op.settlement_due_at = self.timestamp
            elif self.resolution == "abandon":
                op.disposition = "abandoned"

    def __init__(self) -> None:
        # State is assigned by ``Intended.apply``; the annotations above only document it.
        pass

    def _remember_callback(self, callback_id: str, signed_at: datetime | None) -> None:
        # Called only from ``apply`` bodies; assign-only: copies share the old values.
        self.callback_ids = self.callback_ids | {callback_id}
        if signed_at is not None:
            self.callback_signed_at = {**self.callback_signed_at, callback_id: signed_at}

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
        # Called only from ``apply`` bodies: assigns the outcome and opens settlement. The
        # outcome is the latest attempt's (every outcome command checks that), recorded under
        # the current epoch: what a settlement names (issue 32 item 3).
        self.execution = state
        self.outcome_attempt_id = self.last_attempt_id
        self.outcome_epoch = self.epoch
        self.state_entered_at = at
        self.open_attempt_id = None
        self.worker_id = None
        self.lease_expires_at = None
        self.budget_wait_until = None
        if state in TERMINAL_EXECUTION_STATES:
            if self.settlement_max_attempts > 0:
                self.settlement = S.PENDING
                self.settlement_due_at = at
            else:
                self.settlement = S.NOT_REQUIRED

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
        if self.write_refused is not None:
            return "write_refused"
        if self.execution is E.AMBIGUOUS:
            return "budget_exhausted" if self.ambiguity_reason == "budget_exhausted" else "ambiguous"
        if self.late_observation is not None:
            return "late_observation"
        if self.settlement is S.BLOCKED:
            return self.settlement_block_code or "settlement_blocked"
        if self.execution is E.FAILED and self.settlement is S.NOT_REQUIRED:
            return "dead_letter"
        if self.execution in lifecycle.ACTIVE and self.declaration_mismatch is not None:
            return "declaration_mismatch"
        if self.execution in lifecycle.ACTIVE and self.lease_takeovers >= LEASE_TAKEOVERS_FOR_ATTENTION:
            return "lease_expired_repeatedly"
        if self.execution is E.ACCEPTED and self.remote_overdue:
            return "remote_unknown"
        if self.execution in lifecycle.ACTIVE and self.cancel_refused:
            return "cancel_failed"
        return decisions.time_problem(self)

    @property
    def cancel_outcome(self) -> str | None:
        """What became of a requested cancellation, in words an operator reads, or None when
        none was requested: ``cancelled``, ``completed despite cancel`` (the provider finished
        first: the evidence wins, issue 12 item 4), ``failed before cancel took effect``,
        ``cancel failed`` (still running) or ``requested``."""
        if not self.cancel_requested:
            return None
        if self.execution is E.CANCELLED:
            return "cancelled"
        if self.execution is E.SUCCEEDED:
            return "completed despite cancel"
        if self.execution in TERMINAL_EXECUTION_STATES or self.execution is E.AMBIGUOUS:
            return f"{self.execution.value} before cancel took effect"
        return "cancel failed" if self.cancel_refused else "requested"

    def lease_expired(self, now: datetime) -> bool:
        """True when no worker holds a live lease at ``now`` (UTC)."""
        return self.lease_expires_at is None or require_utc(now) >= self.lease_expires_at
