"""Receipts on the attention queue: the keyed commands whose receipt recovery gave up on
(``receipt_stuck``), listed beside the operations, and the operator's decision on one.

Which receipts are stuck is read from the metrics read model's ``opledger_receipts_stuck`` rows
(``projections.metrics``, folded from ``ReceiptRecoveryStopped`` and ``ReceiptResolved``), then
each is loaded from the event store, which has the last word: a receipt that moved on since the
projection last ran is not shown. The status view holds operations only, and a receipt is not
one; the metrics projection already follows the log with its position kept in the same
transaction as its rows, so no new table or runner is needed for a queue that is empty almost
always. An in-memory store has no metrics read model and shows no receipts.

The decision (``retry`` or ``abandon``, with evidence) runs ``Receipt.resolve`` and saves the
receipt, like an operation's ``resolve`` (``adapters.operator.perform``); the CLI's ``opledger
resolve ID`` and ``POST /v1/receipts/{id}/resolve`` call :func:`perform_on_receipt`.

Source: issue 31 item 4; docs/operations.md ("The attention queue").
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError

from adapters.archive_attention import LATE_AFTER_ARCHIVE, late_rows
from ledger.errors import IllegalTransitionError, OperatorActionRefusedError, ReceiptNotFoundError
from ledger.receipts import OPERATOR_RESOLUTIONS, PENDING, Receipt
from projections.metric_deltas import RECEIPTS_STUCK
from projections.metrics_store import MetricsStore
from projections.rows import StatusRow

if TYPE_CHECKING:
    from adapters.runtime import Store

RECEIPT_STUCK = "receipt_stuck"
"""The attention reason of a receipt recovery gave up on."""
KIND_OPERATION = "operation"
KIND_RECEIPT = "receipt"


def load_receipt(app: Any, rid: UUID) -> Receipt | None:
    """The stored receipt ``rid``, or None when there is none (or the id is not a receipt's)."""
    if not app.recorder.select_events(rid, limit=1):
        return None
    try:
        found = app.repository.get(rid)
    except AggregateNotFoundError:
        return None
    return found if isinstance(found, Receipt) else None


def receipt_row(receipt: Receipt) -> dict[str, Any]:
    """A stuck receipt as an attention queue row (JSON-ready): ``kind`` ``receipt``, its id (as
    ``receipt_id``, and as ``id``, the entry's id a generic reader of the queue shows), the
    reason and its detail (command, adoptions, the last error, the epoch), the principal that
    sent it, ``actions`` (the resolutions an operator may record) and its times (UTC)."""
    stopped = receipt.recovery_stopped_at
    return {
        "kind": KIND_RECEIPT, "id": str(receipt.id), "receipt_id": str(receipt.id), "attention": RECEIPT_STUCK,
        "attention_detail": {"command": receipt.scope, "adoptions": receipt.adoptions,
                             "reason": receipt.stop_reason, "epoch": receipt.epoch},
        "command": receipt.scope, "principal": receipt.principal, "status": receipt.state,
        "actions": list(OPERATOR_RESOLUTIONS),
        "created_at": receipt.created_on.isoformat(),
        "updated_at": (stopped or receipt.modified_on).isoformat(),
    }


def stuck_receipts(store: Store, limit: int) -> list[dict[str, Any]]:
    """The receipts recovery gave up on, oldest stop first, as :func:`receipt_row` rows.

    Args:
        store: an open store.
        limit: at most this many rows.
    """
    metrics = MetricsStore.of(store.view)
    if metrics is None:
        return []  # the in-memory store keeps no metrics read model
    totals = metrics.totals()
    candidates = [UUID(receipt_id) for (name, _c, _t, _m, receipt_id), value in totals.items()
                  if name == RECEIPTS_STUCK and value > 0]
    rows = []
    for rid in candidates:
        receipt = load_receipt(store.app, rid)
        if receipt is not None and receipt.state == PENDING and receipt.recovery_stopped_at is not None:
            rows.append(receipt_row(receipt))
    rows.sort(key=lambda row: (row["updated_at"], row["receipt_id"]))
    return rows[:limit]


def attention_queue(store: Store, limit: int, reason: str | None = None) -> list[dict[str, Any]]:
    """The whole attention queue, oldest first: operations (``kind`` ``operation``, status rows),
    stuck receipts (``kind`` ``receipt``) and callbacks kept for archived operations (``kind``
    ``archived``, ``adapters.archive_attention``), merged by ``updated_at``.

    Args:
        store: an open store.
        limit: at most this many rows.
        reason: only this attention reason (None: every reason).
    """
    operations: list[StatusRow] = []
    if reason not in (RECEIPT_STUCK, LATE_AFTER_ARCHIVE):
        operations = store.queries.attention_of(reason, limit) if reason else store.queries.attention(limit)
    rows = [{"kind": KIND_OPERATION, **row.as_json()} for row in operations]
    if reason in (None, RECEIPT_STUCK):
        rows += stuck_receipts(store, limit)
    if reason in (None, LATE_AFTER_ARCHIVE):
        rows += late_rows(store, limit)
    rows.sort(key=lambda row: (_instant(row["updated_at"]), row.get("operation_id") or row.get("receipt_id")))
    return rows[:limit]


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def perform_on_receipt(store: Store, rid: UUID, *, principal: str, resolution: str, evidence: str) -> dict[str, Any]:
    """Record an operator's decision on a receipt recovery gave up on (``Receipt.resolve``).

    Returns:
        ``{"receipt_id", "action": "resolve", "resolution", "status", "recorded": [events]}``
        (``status``: the receipt's state after it, ``pending`` or ``completed``).

    Raises:
        ReceiptNotFoundError: no receipt ``rid``.
        OperatorActionRefusedError: recovery has not given up on it, or it changed meanwhile.
        InvalidArgumentError: an unknown resolution, missing evidence or principal.
    """
    receipt = load_receipt(store.app, rid)
    if receipt is None:
        raise ReceiptNotFoundError(f"no receipt {rid}")
    before = receipt.version
    try:
        receipt.resolve(principal=principal, resolution=resolution, evidence=evidence, now=store.app.clock.now())
    except IllegalTransitionError:
        raise OperatorActionRefusedError(
            f"cannot {resolution} the receipt: recovery has not given up on it (it is {receipt.state}; "
            "only a receipt on the attention queue as receipt_stuck can be resolved)") from None
    try:
        store.app.save(receipt)
    except IntegrityError:
        raise OperatorActionRefusedError(f"cannot {resolution} the receipt: it changed meanwhile (the client's retry "
                                         "or its owner moved it on); look at the attention queue again") from None
    events: list[Any] = list(store.app.events.get(rid, gt=before))
    recorded = [{"version": e.originator_version, "at": e.timestamp.isoformat(), "event": type(e).__name__}
                for e in events]
    return {"receipt_id": str(rid), "action": "resolve", "resolution": resolution, "status": receipt.state,
            "recorded": recorded}
