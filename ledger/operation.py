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

from eventsourcing.domain import Aggregate

from ledger import decisions, lifecycle
from ledger.clock import require_utc
from ledger.commands import OperationCommands
from ledger.declarations import DeliveryMode
from ledger.events import approval as approval_events
from ledger.events import attempt as attempt_events
from ledger.events import lease as lease_events
from ledger.events import operator as operator_events
from ledger.events import remote as remote_events
from ledger.events import settlement as settlement_events
from ledger.events.base import OperationEvent
from ledger.identity import Source
from ledger.operation_state import not_yet_happened
from ledger.outcomes import FailureCategory
from ledger.status import (
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



class Operation(OperationCommands, Aggregate):
    """One authorized external effect (DESIGN §3 'operation').

    Build with :meth:`intend`; never with the constructor. Reading attributes is free; changing
    state goes through a command method, which raises :class:`IllegalTransitionError`,
    :class:`StaleEpochError`, :class:`LeaseExpiredError` or
    :class:`AttemptBudgetExceededError` on a command the lifecycle does not allow.
    """

    # ------------------------------------------------------------------ events (facts)

    # Each event is defined in ``ledger.events`` by concern and nested here under the name its
    # stored topic has (``ledger.operation:Operation.<Name>``, ``ledger.events.base.stored_as``).
    Event = OperationEvent

    ApprovalGranted = approval_events.ApprovalGranted
    ApprovalVoided = approval_events.ApprovalVoided
    ApprovalDenied = approval_events.ApprovalDenied
    Claimed = lease_events.Claimed
    DeclarationMismatched = lease_events.DeclarationMismatched
    BudgetWaited = lease_events.BudgetWaited
    LeaseRenewed = lease_events.LeaseRenewed
    AttemptStarted = attempt_events.AttemptStarted
    Succeeded = attempt_events.Succeeded
    Failed = attempt_events.Failed
    Ambiguous = attempt_events.Ambiguous
    RetryScheduled = attempt_events.RetryScheduled
    DeadlineExceeded = attempt_events.DeadlineExceeded
    BudgetExhausted = attempt_events.BudgetExhausted
    Accepted = remote_events.Accepted
    RemoteStatusObserved = remote_events.RemoteStatusObserved
    RemoteOverdue = remote_events.RemoteOverdue
    CallbackReceived = remote_events.CallbackReceived
    LateObservationRecorded = remote_events.LateObservationRecorded
    SettlementFailed = settlement_events.SettlementFailed
    SettlementBlocked = settlement_events.SettlementBlocked
    Settled = settlement_events.Settled
    CancelRequested = operator_events.CancelRequested
    Cancelled = operator_events.Cancelled
    CancelFailed = operator_events.CancelFailed
    WriteRefused = operator_events.WriteRefused
    Resolved = operator_events.Resolved

    class Intended(OperationEvent, Aggregate.Created):
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
            op.__dict__.update(not_yet_happened())

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
