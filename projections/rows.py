"""The operation status row: one per operation, derived from the aggregate alone (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from eventsourcing.utils import get_topic

from ledger.errors import CorruptRecordError, UnreadableEventError
from ledger.operation import Operation
from ledger.topics import topics_of


class StatusRow(NamedTuple):
    """An operation's status as the read model shows it. Times are UTC-aware.

    Execution and settlement state are separate fields; ``status`` is derived from both
    (``ledger.status.derive_status``); attention and disposition are separate too
    (docs/adr/0001-operation-lifecycle.md).

    Immutable; ``row._replace(field=value)`` gives a changed copy. A named tuple in table column
    order (``COLUMNS``), so the views write it as it is: building a frozen dataclass of 28
    fields cost 4.2 µs against 0.5 µs, once per operation per projection batch.
    """

    operation_id: UUID
    version: int
    tenant: str
    integration: str
    integration_version: int
    delivery_mode: str
    status: str
    execution: str
    settlement: str
    approval: str
    attempts: int
    max_attempts: int
    epoch: int
    worker_id: str | None
    lease_expires_at: datetime | None
    next_due_at: datetime | None
    remote_id: str | None
    attention: str | None
    disposition: str | None
    failure_category: str | None
    ambiguity_reason: str | None
    cancel_requested: bool
    source_entity_type: str
    source_entity_id: UUID
    source_entity_version: int
    effect_index: int
    created_at: datetime
    updated_at: datetime
    attention_detail: str | None = None
    """What the operator needs to act on ``attention``, as JSON text; for ``unreadable_event``
    and ``corrupt_record``: the record's ``topic``, its ``version`` (its place in the
    operation), its log ``position`` where known, and the ``error``."""

    def as_dict(self) -> dict[str, Any]:
        """The row as plain data (UUIDs and datetimes kept as objects)."""
        return self._asdict()

    def as_json(self) -> dict[str, Any]:
        """The row as JSON-ready data (UUIDs as strings, datetimes ISO 8601 UTC, the attention
        detail as an object)."""
        out: dict[str, Any] = {}
        for key, value in self._asdict().items():
            if isinstance(value, UUID):
                value = str(value)
            elif isinstance(value, datetime):
                value = value.isoformat()
            out[key] = value
        if self.attention_detail is not None:
            out["attention_detail"] = json.loads(self.attention_detail)
        return out


COLUMNS: tuple[str, ...] = StatusRow._fields


UNREADABLE_EVENT = "unreadable_event"
"""Attention reason: a stored event this code cannot decode (a topic that does not resolve, a
newer ``class_version``); the row keeps the last state that decoded and stops being due. Cleared
by itself once the running code reads the event (``StatusProjection.recheck_unreadable``)."""

CORRUPT_RECORD = "corrupt_record"
"""Attention reason: a stored event that is malformed for any version of the code."""


@dataclass(frozen=True, slots=True)
class AttentionMark:
    """Why an operation's row is put on the attention queue by a reader that cannot fold it.

    Attributes:
        reason: ``unreadable_event`` or ``corrupt_record``.
        detail: JSON text for ``StatusRow.attention_detail``.
    """

    reason: str
    detail: str

    @classmethod
    def of(cls, exc: CorruptRecordError, position: int | None = None) -> AttentionMark:
        """The mark for a record that does not decode.

        Args:
            exc: the decoding error (an ``UnreadableEventError`` gives ``unreadable_event``).
            position: the record's position in the log (notification id), where known.

        Source: issue 10 item 5; docs/operations.md.
        """
        reason = UNREADABLE_EVENT if isinstance(exc, UnreadableEventError) else CORRUPT_RECORD
        detail = {"topic": exc.topic, "version": exc.position, "position": position, "error": exc.reason}
        return cls(reason, json.dumps(detail))


@dataclass(frozen=True, slots=True)
class DueRow:
    """The slice of a status row a worker needs to choose due work (``StatusView.due``)."""

    operation_id: UUID
    version: int
    execution: str
    settlement: str
    cancel_requested: bool


def row_from_operation(op: Operation) -> StatusRow:
    """Derive the status row of ``op`` (pure; no I/O)."""
    source = op.source
    # Positional, in ``COLUMNS`` order: keywords cost a third of building the row.
    return StatusRow(
        op.id,
        op.version,
        op.tenant,
        op.integration_name,
        op.integration_version,
        op.delivery_mode.value,
        op.status.value,
        op.execution.value,
        op.settlement.value,
        op.approval,
        op.attempts,
        op.max_attempts,
        op.epoch,
        op.worker_id,
        op.lease_expires_at,
        op.next_due_at,
        op.remote_id,
        op.attention,
        op.disposition,
        (op.failure or {}).get("category"),
        op.ambiguity_reason,
        op.cancel_requested,
        source.entity_type,
        source.entity_id,
        source.entity_version,
        source.effect_index,
        op.created_on,
        op.modified_on,
        None if op.write_refused is None and op.late_observation is None else _attention_detail(op),
    )


def _attention_detail(op: Operation) -> str:
    """``attention_detail`` of a refused write (issue 35: what it was for and what the store
    said), else of a late observation (issue 12 item 3: what the provider reported after the
    recorded outcome, and that outcome), as JSON text."""
    if op.write_refused is not None:
        return json.dumps({"kind": op.write_refused, "error": op.write_refused_error})
    return json.dumps(op.late_observation)


def due_when_written(row: StatusRow) -> bool:
    """Whether writing ``row`` wakes workers (the status view NOTIFYs them, ``migrations.drivers.notify``):
    when it has work due by its own last fact (``next_due_at`` at or before ``updated_at``, both
    UTC), such as a granted approval, a cancel request or a settlement to retry now. A write that
    ends, settles or leases an operation gives no one anything to do, and waking every worker for
    it cost a cycle each; work due later is found by the idle poll.

    A new intent (the row of its first event, ``Intended``) wakes no one here either: the event
    log's own NOTIFY already made every worker read the log's tail for it (``executors.tail``);
    the second wake, one cycle per intent and per worker, slowed the two-worker end to end
    (faster without it in 4 of 4 interleaved pairs, docs/performance.md)."""
    if row.version == 1:
        return False
    return row.next_due_at is not None and row.next_due_at <= row.updated_at


def operation_event_classes() -> tuple[type, ...]:
    """Every concrete ``Operation`` event class."""
    return tuple(
        cls for cls in vars(Operation).values()
        if isinstance(cls, type) and issubclass(cls, Operation.Event) and cls is not Operation.Event
    )


def ledger_topics() -> tuple[str, ...]:
    """Current topics of every ``Operation`` event class."""
    return tuple(get_topic(cls) for cls in operation_event_classes())


def read_topics() -> tuple[str, ...]:
    """The topics projections read: the current ones, then every old topic registered for an
    ``Operation`` event class (``eventsourcing.utils.register_topic``), so records stored under
    a renamed class's old topic are read too. Cached until another topic is registered."""
    return topics_of(operation_event_classes())
