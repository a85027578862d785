"""Records that arrive for an archived operation: kept, and on the attention queue, never appended.

Once ``opledger archive`` removed an operation's records, nothing may be appended to it: its
history would start past version 1, a half operation nobody can load. A provider may still
report on it (a late callback). That report is kept in the store's archive tables
(``Archives.archive_late_record``: operation, callback id, segment, integration, outcome, status
word, text, when) and shown on the attention queue as ``late_after_archive`` with the segment
that holds the operation, until an operator acknowledges it (``opledger resolve ID --resolution
acknowledge --evidence ...``). A provider's retry of the same message is a duplicate. The
operation stays archived: nothing resurrects it.

Shown by ``opledger attention`` and ``GET /v1/attention``
(``adapters.receipt_attention.attention_queue`` merges them in); not counted by the
``opledger_attention`` gauge, whose labels (tenant, delivery mode) these records do not carry.

Source: issue 29; docs/adr/0010-archives.md §4.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger.archives import segment_name
from ledger.errors import OperationInArchiveError, OperatorActionRefusedError
from ledger.facts import FactKind, storable_fact, storable_fact_or_none
from ledger.intents import MAX_EVIDENCE_CHARS, check_operator_text, require_principal
from migrations.drivers import LateRecord, archives_of

if TYPE_CHECKING:
    from adapters.runtime import Store

LATE_AFTER_ARCHIVE = "late_after_archive"
"""The attention reason of a record kept for an archived operation."""
KIND_ARCHIVED = "archived"
"""The attention queue entry kind of an archived operation."""


def keep_late_callback(app: Any, archived: OperationInArchiveError, *, integration: str, callback_id: str,
                       outcome: str, remote_status: str | None, detail: str, now: datetime) -> bool:
    """Keep an authenticated callback for an archived operation (see the module).

    Args:
        app: the host application over the store.
        archived: the archive index's answer for the operation.
        integration: the integration whose callback route it came in on (and whose secret signed it).
        callback_id: the message's ``webhook-id``.
        outcome, remote_status, detail: what the provider reported (stored escaped where the
            store cannot hold them exactly: ``ledger.facts``).
        now: when it arrived, UTC.

    Returns:
        True when kept now; False when this callback id was kept before (a retry).
    """
    return archives_of(app).archive_late_record(LateRecord(
        archived.operation_id, callback_id, archived.segment, integration, outcome,
        storable_fact_or_none(remote_status, FactKind.STATUS), storable_fact(detail, FactKind.DETAIL), now))


def late_rows(store: Store, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` unacknowledged late records of archived operations as attention queue
    rows, oldest first: ``kind`` ``archived``, the operation id (also as ``id``), its integration,
    ``attention`` ``late_after_archive``, ``attention_detail`` (segment, callback id, outcome,
    status word, text) and ``updated_at`` (when it arrived, UTC)."""
    records = archives_of(store.app).archive_late_list(limit)
    return [{"kind": KIND_ARCHIVED, "id": str(r.operation_id), "operation_id": str(r.operation_id),
             "integration": r.integration, "attention": LATE_AFTER_ARCHIVE,
             "attention_detail": {"segment": segment_name(r.segment), "callback_id": r.callback_id,
                                  "outcome": r.outcome, "remote_status": r.remote_status, "detail": r.detail},
             "updated_at": r.received_at.isoformat()} for r in records]


def acknowledge_late(store: Store, op_id: UUID, *, principal: str, evidence: str) -> dict[str, Any]:
    """An operator saw the late records of archived operation ``op_id``: they leave the queue.

    Returns:
        ``{"operation_id", "action": "resolve", "resolution": "acknowledge", "acknowledged": n,
        "status": "archived"}``.

    Raises:
        InvalidArgumentError: no principal, or evidence missing or too long.
        OperatorActionRefusedError: no unacknowledged late record of it waits.
    """
    require_principal(principal)
    check_operator_text("evidence", evidence, MAX_EVIDENCE_CHARS, required=True)
    n = archives_of(store.app).archive_late_acknowledge(op_id, principal=principal, evidence=evidence,
                                                         at=store.app.clock.now())
    if not n:
        raise OperatorActionRefusedError(f"nothing to acknowledge: operation {op_id} is archived and no late "
                                         "record of it waits on the attention queue")
    return {"operation_id": str(op_id), "action": "resolve", "resolution": "acknowledge", "acknowledged": n,
            "status": "archived"}
