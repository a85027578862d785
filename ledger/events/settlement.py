"""The settlement events: a failed try, a blocked settlement, the settlement itself.

Nested in ``ledger.operation.Operation`` under their stored topics (see ``ledger.events``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger.events.base import OperationEvent, stored_as, without_settled_outcome
from ledger.status import SettlementState as S

if TYPE_CHECKING:
    from ledger.operation import Operation


@stored_as("SettlementFailed")
class SettlementFailed(OperationEvent):
    """The entity's settlement action raised; tried again at ``retry_at`` without egress.
    Class version 2 added the outcome it tried to settle (``attempt_id``, ``epoch``; issue 32
    item 3); version 1 records upcast with None for both."""

    class_version = 2
    error: str
    retry_at: datetime
    attempt_id: UUID | None
    epoch: int | None

    upcast_v1_v2 = staticmethod(without_settled_outcome)

    def apply(self, op: Operation) -> None:
        op.settlement_attempts += 1
        op.settlement_error = self.error
        op.settlement_due_at = self.retry_at


@stored_as("SettlementBlocked")
class SettlementBlocked(OperationEvent):
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
        without_settled_outcome(state)

    def apply(self, op: Operation) -> None:
        op.settlement_attempts += 1
        op.settlement = S.BLOCKED
        op.settlement_block_code = self.code or None
        op.settlement_error = self.reason
        op.settlement_due_at = None


@stored_as("Settled")
class Settled(OperationEvent):
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

    upcast_v1_v2 = staticmethod(without_settled_outcome)

    def apply(self, op: Operation) -> None:
        op.settlement = S.SETTLED
        op.settled_entity_version = self.entity_version
        op.settlement_due_at = None
        if op.disposition is None:
            op.disposition = "settled"
