"""The lease events: a claim under a new epoch, a refused claim, a call budget wait, a renewal.

Nested in ``ledger.operation.Operation`` under their stored topics (see ``ledger.events``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from ledger.events.base import OperationEvent, stored_as
from ledger.status import ExecutionState as E

if TYPE_CHECKING:
    from ledger.operation import Operation


@stored_as("Claimed")
class Claimed(OperationEvent):
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


@stored_as("DeclarationMismatched")
class DeclarationMismatched(OperationEvent):
    """A worker refused the operation: its declaration of the same name and version has
    another digest than the one recorded on ``Intended`` (issue 14 item 5)."""

    worker_id: str
    declared_digest: str

    def apply(self, op: Operation) -> None:
        op.declaration_mismatch = self.declared_digest


@stored_as("BudgetWaited")
class BudgetWaited(OperationEvent):
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


@stored_as("LeaseRenewed")
class LeaseRenewed(OperationEvent):
    epoch: int
    lease_expires_at: datetime

    def apply(self, op: Operation) -> None:
        op.lease_expires_at = self.lease_expires_at
