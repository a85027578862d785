"""``row_from_operation`` builds ``StatusRow`` positionally: each column must hold its attribute.

The expected values are looked up by column name here, so a row built in the wrong order (two
columns swapped) fails, whatever their types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ledger.operation import Operation
from ledger.status import ExecutionState as E
from ledger.status import SettlementState as S
from projections.rows import COLUMNS, due_when_written, row_from_operation
from tests.unit.builders import build, build_settlement

BY_COLUMN: dict[str, Callable[[Operation], Any]] = {
    "operation_id": lambda op: op.id,
    "version": lambda op: op.version,
    "tenant": lambda op: op.tenant,
    "integration": lambda op: op.integration_name,
    "integration_version": lambda op: op.integration_version,
    "delivery_mode": lambda op: op.delivery_mode.value,
    "status": lambda op: op.status.value,
    "execution": lambda op: op.execution.value,
    "settlement": lambda op: op.settlement.value,
    "approval": lambda op: op.approval,
    "attempts": lambda op: op.attempts,
    "max_attempts": lambda op: op.max_attempts,
    "epoch": lambda op: op.epoch,
    "worker_id": lambda op: op.worker_id,
    "lease_expires_at": lambda op: op.lease_expires_at,
    "next_due_at": lambda op: op.next_due_at,
    "remote_id": lambda op: op.remote_id,
    "attention": lambda op: op.attention,
    "disposition": lambda op: op.disposition,
    "failure_category": lambda op: (op.failure or {}).get("category"),
    "ambiguity_reason": lambda op: op.ambiguity_reason,
    "cancel_requested": lambda op: op.cancel_requested,
    "source_entity_type": lambda op: op.source.entity_type,
    "source_entity_id": lambda op: op.source.entity_id,
    "source_entity_version": lambda op: op.source.entity_version,
    "effect_index": lambda op: op.source.effect_index,
    "created_at": lambda op: op.created_on,
    "updated_at": lambda op: op.modified_on,
    "attention_detail": lambda op: None,  # set only by readers that cannot fold the operation
}


def test_every_column_has_an_expectation() -> None:
    assert set(BY_COLUMN) == set(COLUMNS)


@pytest.mark.parametrize("state", [E.PENDING, E.CLAIMED, E.DISPATCHING, E.ACCEPTED, E.FAILED, E.AMBIGUOUS])
def test_row_columns_hold_their_attributes(state: E) -> None:
    op = build(state).op
    row = row_from_operation(op)
    assert row.as_dict() == {name: expect(op) for name, expect in BY_COLUMN.items()}


@pytest.mark.parametrize("state", [S.PENDING, S.SETTLED, S.BLOCKED])
def test_row_columns_hold_their_attributes_when_settling(state: S) -> None:
    op = build_settlement(state).op
    row = row_from_operation(op)
    assert row.as_dict() == {name: expect(op) for name, expect in BY_COLUMN.items()}


@pytest.mark.parametrize(("built", "wakes"), [
    (lambda: build(E.PENDING), False),  # a new intent: the event log's NOTIFY already woke them
    (lambda: build(E.CLAIMED), False),  # leased: due when the lease expires, later
    (lambda: build(E.DISPATCHING), False),
    (lambda: build_settlement(S.PENDING), True),  # an outcome to settle now
    (lambda: build_settlement(S.SETTLED), False),  # over: nothing to do
    (lambda: build(E.CANCELLED), True),  # the cancellation is settled into the entity now
    (lambda: build_settlement(S.NOT_REQUIRED), False),
], ids=["pending", "claimed", "dispatching", "to-settle", "settled", "cancelled", "ended-unsettled"])
def test_only_writes_with_work_due_now_wake_workers(built: Callable[[], Any], wakes: bool) -> None:
    assert due_when_written(row_from_operation(built().op)) is wakes

