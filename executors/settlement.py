"""Settlement: apply a terminal outcome to the source entity, once (DESIGN §1.5, §7).

The change loads the entity, calls its declared action with a ``SettlementOutcome`` and records
``Settled``; ``commit_changes`` saves entity and operation in one ``save()``, so the action's
effect and the settlement fact commit together. A failing action is recorded as
``SettlementFailed`` and retried with backoff, without any new egress, and after the declared
number of tries becomes ``SettlementBlocked`` with an attention reason.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Sequence
from uuid import UUID

import structlog
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate

from executors.commit import Change
from ledger.application import LedgerApplication
from ledger.errors import UnknownIntegrationError
from ledger.operation import Operation
from ledger.settlement import SettlementOutcome
from ledger.status import SettlementState

log = structlog.get_logger("opledger.settlement")

ERROR_TEXT_LIMIT = 500


def settlement_due(op: Operation, now: datetime) -> bool:
    """True when ``op`` waits for settlement and its retry time has come."""
    return (op.settlement is SettlementState.PENDING and op.settlement_due_at is not None
            and op.settlement_due_at <= now)


def settle_change(app: LedgerApplication, now: datetime, entities: dict[UUID, Aggregate] | None = None) -> Change:
    """Return the change that settles an operation (re-runnable against a fresh load).

    Args:
        app: the host application.
        now: UTC-aware instant.
        entities: source entities already loaded in one query, by id. Each is used once: a
            re-run after a conflicting batch loads the entity afresh.
    """
    preloaded = entities if entities is not None else {}

    def change(op: Operation) -> Sequence[Aggregate]:
        try:
            declaration = app.registry.get(op.integration_name, op.integration_version)
        except UnknownIntegrationError as exc:
            op.block_settlement(now=now, reason=f"{exc}; declare it in the worker's application")
            return []
        action = declaration.settlement
        if action is None:  # declared without settlement after the fact: nothing can apply it
            op.block_settlement(now=now, reason="the declaration names no settlement action")
            return []
        try:
            entity = preloaded.pop(op.source.entity_id, None) or app.repository.get(op.source.entity_id)
        except AggregateNotFoundError:
            op.block_settlement(now=now, reason=f"source entity {op.source.entity_id} not found")
            return []
        method = getattr(entity, action.method, None)
        if method is None:
            op.block_settlement(now=now, reason=f"{type(entity).__name__} has no method {action.method!r}")
            return []
        try:
            method(SettlementOutcome.of(op))
        except Exception as exc:  # the host's action failed: a fact to record, not a crash
            error = f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_LIMIT]
            log.warning("settlement action failed", operation_id=str(op.id), error=error)
            if op.settlement_attempts + 1 >= op.settlement_max_attempts:
                op.block_settlement(now=now, reason=error)
            else:
                delay = action.backoff_seconds * (2 ** op.settlement_attempts)
                op.fail_settlement(now=now, error=error, retry_at=now + timedelta(seconds=delay))
            return []
        op.settle(now=now, entity_version=entity.version)
        return [entity]

    return change
