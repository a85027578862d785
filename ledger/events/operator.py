"""The cancellation and operator events: a request, its result, a refused write, a resolution.

Nested in ``ledger.operation.Operation`` under their stored topics (see ``ledger.events``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger.events.base import OperationEvent, stored_as
from ledger.outcomes import FailureCategory
from ledger.status import ExecutionState as E
from ledger.status import SettlementState as S

if TYPE_CHECKING:
    from ledger.operation import Operation


@stored_as("CancelRequested")
class CancelRequested(OperationEvent):
    principal: str
    reason: str

    def apply(self, op: Operation) -> None:
        op.cancel_requested = True
        op.cancel_reason = self.reason
        op.due_at = self.timestamp
        op.write_refused = None  # an operator acted: workers take it again (issue 35)


@stored_as("Cancelled")
class Cancelled(OperationEvent):
    epoch: int | None
    reason: str

    def apply(self, op: Operation) -> None:
        op._reach_outcome(E.CANCELLED, self.timestamp)
        op.disposition = "cancelled"


@stored_as("CancelFailed")
class CancelFailed(OperationEvent):
    epoch: int
    reason: str

    def apply(self, op: Operation) -> None:
        op.cancel_reason = f"cancel failed: {self.reason}"
        op.cancel_refused = True


@stored_as("WriteRefused")
class WriteRefused(OperationEvent):
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


@stored_as("Resolved")
class Resolved(OperationEvent):
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
