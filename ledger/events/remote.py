"""The events of accepted work: acceptance, polled status, the overdue mark, callbacks.

Nested in ``ledger.operation.Operation`` under their stored topics (see ``ledger.events``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger.events.base import OperationEvent, stored_as
from ledger.outcomes import FailureCategory
from ledger.status import ExecutionState as E

if TYPE_CHECKING:
    from ledger.operation import Operation


@stored_as("Accepted")
class Accepted(OperationEvent):
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


@stored_as("RemoteStatusObserved")
class RemoteStatusObserved(OperationEvent):
    epoch: int
    remote_status: str

    def apply(self, op: Operation) -> None:
        op.remote_status = self.remote_status


@stored_as("RemoteOverdue")
class RemoteOverdue(OperationEvent):
    """The ``accepted`` deadline passed at ``deadline_at`` while the provider had not
    answered: not an outcome (it may still finish). The operation is on the attention queue
    as ``remote_unknown`` and is followed until ``follow_until``."""

    deadline_at: datetime

    def apply(self, op: Operation) -> None:
        op.remote_overdue = True


@stored_as("CallbackReceived")
class CallbackReceived(OperationEvent):
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


@stored_as("LateObservationRecorded")
class LateObservationRecorded(OperationEvent):
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
