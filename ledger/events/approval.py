"""The approval events: an approver's consent, its voiding before use, a refusal (issue 14 item 2).

Nested in ``ledger.operation.Operation`` under their stored topics (see ``ledger.events``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from ledger.events.base import OperationEvent, stored_as
from ledger.outcomes import FailureCategory
from ledger.status import APPROVAL_DENIED, APPROVAL_GRANTED, APPROVAL_REQUIRED

if TYPE_CHECKING:
    from ledger.operation import Operation


@stored_as("ApprovalGranted")
class ApprovalGranted(OperationEvent):
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


@stored_as("ApprovalVoided")
class ApprovalVoided(OperationEvent):
    """A granted approval stopped allowing egress before it was used (``reason``:
    ``approval_expired`` or ``approval_fingerprint_mismatch``); the operation waits for a
    new approval."""

    reason: str

    def apply(self, op: Operation) -> None:
        op.approval = APPROVAL_REQUIRED
        op.approval_fingerprint = None
        op.approval_expires_at = None
        op.approval_voided = self.reason


@stored_as("ApprovalDenied")
class ApprovalDenied(OperationEvent):
    principal: str
    reason: str

    def apply(self, op: Operation) -> None:
        op.approval = APPROVAL_DENIED
        op._end_failed(self.timestamp, FailureCategory.APPROVAL_DENIED, self.reason)
