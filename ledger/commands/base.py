"""The base of the ``Operation`` commands: the state they read, and the guards every command
passes before it records an event.

The guards ask the transition table (``ledger.lifecycle``, built from ``ledger.transitions``)
and the decisions (``ledger.decisions``); a refusal is a named subclass of
``IllegalTransitionError`` (``ledger.transition_errors``), a stale fencing epoch a
``StaleEpochError``. Source: docs/adr/0001-operation-lifecycle.md; DESIGN §4.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger import decisions, lifecycle
from ledger.decisions import OutcomeRef
from ledger.errors import StaleEpochError, StaleSettlementError
from ledger.operation_state import OperationState
from ledger.status import Status
from ledger.transition_errors import NotAllowedInStateError, NotLatestAttemptError


class CommandBase(OperationState):
    """The guards of the ``Operation`` commands (a mixin; the commands are its subclasses)."""

    if TYPE_CHECKING:  # provided by ``Operation`` and the library's ``Aggregate``
        id: UUID
        Accepted: type[Any]
        Ambiguous: type[Any]
        ApprovalDenied: type[Any]
        ApprovalGranted: type[Any]
        ApprovalVoided: type[Any]
        AttemptStarted: type[Any]
        BudgetExhausted: type[Any]
        BudgetWaited: type[Any]
        CallbackReceived: type[Any]
        CancelFailed: type[Any]
        CancelRequested: type[Any]
        DeclarationMismatched: type[Any]
        Cancelled: type[Any]
        Claimed: type[Any]
        DeadlineExceeded: type[Any]
        Failed: type[Any]
        Intended: type[Any]
        LateObservationRecorded: type[Any]
        LeaseRenewed: type[Any]
        RemoteOverdue: type[Any]
        RemoteStatusObserved: type[Any]
        Resolved: type[Any]
        RetryScheduled: type[Any]
        Settled: type[Any]
        SettlementBlocked: type[Any]
        SettlementFailed: type[Any]
        Succeeded: type[Any]
        WriteRefused: type[Any]

        @property
        def status(self) -> Status: ...

        @property
        def deadline_at(self) -> datetime | None: ...

        def lease_expired(self, now: datetime) -> bool: ...

        def trigger_event(self, event_class: type[Any], **kwargs: Any) -> None: ...

        @classmethod
        def _create(cls, event_class: type[Any], **kwargs: Any) -> Any: ...

    def _allow(self, command: str, detail: str = "") -> None:
        if self.execution not in lifecycle.BY_EXECUTION[command]:
            raise NotAllowedInStateError(command, self.execution.value, detail)

    def _allow_settlement(self, command: str) -> None:
        if self.settlement not in lifecycle.BY_SETTLEMENT[command]:
            raise NotAllowedInStateError(command, f"settlement {self.settlement.value}")

    def _fence(self, epoch: int) -> None:
        if epoch != self.epoch:
            raise StaleEpochError(self.id, epoch, self.epoch)

    def _fence_settlement(self, settles: OutcomeRef | None) -> None:
        problem = None if settles is None else decisions.settlement_fence_problem(self, settles)
        if problem is not None:
            raise StaleSettlementError(self.id, problem)

    def _attempt(self, attempt_id: UUID | None, command: str) -> None:
        if attempt_id is not None and attempt_id != self.last_attempt_id:
            raise NotLatestAttemptError(command, self.execution.value,
                                        f"attempt {attempt_id} is not the operation's latest attempt")
