"""The attempt and outcome events: an attempt recorded before egress, and what ended it.

Nested in ``ledger.operation.Operation`` under their stored topics (see ``ledger.events``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from ledger.events.base import OperationEvent, stored_as, without_status_or_detail
from ledger.outcomes import FailureCategory
from ledger.status import ExecutionState as E

if TYPE_CHECKING:
    from ledger.operation import Operation


@stored_as("AttemptStarted")
class AttemptStarted(OperationEvent):
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


@stored_as("Succeeded")
class Succeeded(OperationEvent):
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


@stored_as("Failed")
class Failed(OperationEvent):
    epoch: int
    attempt_id: UUID | None
    category: str
    retryable: bool
    status_code: int | None
    detail: str

    def apply(self, op: Operation) -> None:
        op._end_failed(self.timestamp, self.category, self.detail, retryable=self.retryable,
                       status_code=self.status_code)


@stored_as("Ambiguous")
class Ambiguous(OperationEvent):
    epoch: int
    attempt_id: UUID | None
    reason: str
    status_code: int | None
    detail: str

    def apply(self, op: Operation) -> None:
        op.excerpt = self.detail
        op._end_ambiguous(self.timestamp, self.reason)


@stored_as("RetryScheduled")
class RetryScheduled(OperationEvent):
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

    upcast_v1_v2 = staticmethod(without_status_or_detail)

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


@stored_as("DeadlineExceeded")
class DeadlineExceeded(OperationEvent):
    state: str
    deadline_at: datetime
    ambiguous: bool

    def apply(self, op: Operation) -> None:
        if self.ambiguous:
            op._end_ambiguous(self.timestamp, "deadline_exceeded")
        else:
            op._end_failed(self.timestamp, FailureCategory.DEADLINE, f"deadline of state {self.state} passed")


@stored_as("BudgetExhausted")
class BudgetExhausted(OperationEvent):
    """No attempt left. Class version 2 added the last attempt's ``status_code`` and bounded
    ``detail`` (issue 34 item 5); version 1 records upcast with None and ``""``."""

    class_version = 2
    epoch: int
    attempts: int
    ambiguous: bool
    status_code: int | None
    detail: str

    upcast_v1_v2 = staticmethod(without_status_or_detail)

    def apply(self, op: Operation) -> None:
        if self.ambiguous:
            op._end_ambiguous(self.timestamp, "budget_exhausted")
        else:
            last = f"; the last answered: {self.detail}" if self.detail else ""
            op._end_failed(self.timestamp, FailureCategory.ATTEMPTS_EXHAUSTED,
                           f"{self.attempts} attempts used{last}", status_code=self.status_code)
