"""Expired idempotency receipts in the archive run: selected, written into segments with their
final envelope, recorded, then removed, like closed operations (docs/adr/0010-archives.md §6;
docs/adr/0006-idempotency-receipts.md).

A receipt expires (``ReceiptExpired``, appended by ``executors.receipt_retention`` once its
retention has passed and its command's operations are resolved) and then no longer replays; its
records stayed in the store for good until now. An archive run selects every receipt whose last
record is its ``ReceiptExpired``, expired before the run's latest cutoff, with its history whole
from version 1 and no archived generation still in the store (``Archives.archive_receipts_held``);
the segment holds its records as stored, a readable copy (the request left out: it is in the
records, and may hold what a reader of ``decoded.jsonl`` should not see) and a ``status.jsonl``
line of kind ``receipt`` with its final envelope. The segment is recorded with an index row per
receipt generation in the transaction that records it, and only then are the records deleted,
in bounded batches (``Archives.archive_receipts_remove``): one reopened meanwhile (a record past
the version archived) is kept whole and never selected again. The same key used again after
removal opens a new generation from version 1, which expires and is archived in its turn.

Selection reads the log's ``ReceiptExpired`` records from its start on each run (a scan of the
log, bounded by the receipts not archived yet, which removal keeps few).

Source: issue 29 item 5; docs/adr/0010-archives.md §6.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from adapters.archive_reads import decoded_events
from adapters.archive_run import segment_metrics, summary_of
from adapters.archive_select import PAGE
from ledger import failpoints
from ledger.archive_check import verify_segment
from ledger.archives import ArchiveError, Segment, StoredRecord, write_segment
from ledger.receipts import EXPIRED, Receipt
from ledger.replay import project_events
from ledger.topics import topics_of
from migrations.drivers import Archives, RecordedSegment, driver_of

_LEFT_OUT = frozenset({"originator_id", "originator_version", "timestamp", "originator_topic", "request"})


@dataclass(frozen=True)
class ExpiredReceipt:
    """A receipt chosen for the archive: its state as loaded and its stored records, in order."""

    receipt: Receipt
    records: list[StoredRecord]


def select_receipts(app: Any, archives: Archives, cutoff: datetime, *, limit: int) -> list[ExpiredReceipt]:
    """Up to ``limit`` expired receipts that may be archived now (see the module).

    Args:
        app: the host application over the store.
        archives: the store's driver.
        cutoff: receipts that expired strictly before this may go (UTC).
        limit: how many at most.
    """
    driver = driver_of(app)
    topics = list(topics_of([Receipt.ReceiptExpired]))
    expired: dict[UUID, int] = {}
    after = 0
    ids: dict[Any, UUID] = {}
    while True:
        page = driver.records_list_after(after, PAGE, topics, ids)
        for _, receipt_id, version, _, _ in page:
            expired[receipt_id] = max(expired.get(receipt_id, 0), version)
        if len(page) < PAGE:
            break
        after = page[-1][0]
    held = archives.archive_receipts_held(expired) if expired else set()
    wanted = [receipt_id for receipt_id in expired if receipt_id not in held]
    chosen: list[ExpiredReceipt] = []
    for start in range(0, len(wanted), PAGE):
        by_id: dict[UUID, list[StoredRecord]] = {}
        for receipt_id, version, topic, state in driver.events_list_many(wanted[start:start + PAGE]):
            by_id.setdefault(receipt_id, []).append(StoredRecord(receipt_id, version, topic, bytes(state)))
        for receipt_id in wanted[start:start + PAGE]:
            records = by_id.get(receipt_id, [])
            if [r.originator_version for r in records] != list(range(1, expired[receipt_id] + 1)):
                continue  # reopened since it expired, or not whole: not this run's
            receipt: Any = project_events(None, decoded_events(app, records))
            if isinstance(receipt, Receipt) and receipt.state == EXPIRED and receipt.modified_on < cutoff:
                chosen.append(ExpiredReceipt(receipt, records))
                if len(chosen) == limit:
                    return chosen
    return chosen


def _plain(value: Any) -> Any:
    """``value`` as JSON data: bytes as UTF-8 text (base64, marked, when they are not text),
    ids and times as strings."""
    def other(item: Any) -> Any:
        if isinstance(item, bytes):
            try:
                return item.decode("utf-8")
            except UnicodeDecodeError:
                return {"base64": base64.b64encode(item).decode("ascii")}
        return str(item)

    return json.loads(json.dumps(value, default=other))


def receipt_lines(app: Any, chosen: ExpiredReceipt) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A chosen receipt's ``decoded.jsonl`` lines (one per record, the request left out) and its
    ``status.jsonl`` line (kind ``receipt``, its final envelope)."""
    receipt, rid = chosen.receipt, str(chosen.receipt.id)
    decoded = [{"id": rid, "version": event.originator_version, "at": event.timestamp.isoformat(),
                "event": type(event).__name__,
                "details": _plain({k: v for k, v in vars(event).items() if k not in _LEFT_OUT})}
               for event in decoded_events(app, chosen.records)]
    envelope = receipt.envelope
    status = {"id": rid, "kind": "receipt", "status": receipt.state, "scope": receipt.scope,
              "principal": receipt.principal, "key": receipt.key, "generation": receipt.generation,
              "completed_at": receipt.completed_at.isoformat() if receipt.completed_at else None,
              "expired_at": receipt.modified_on.isoformat(), "operation_ids": _plain(receipt.operation_ids),
              "envelope": None if envelope is None else _plain(
                  {"status": envelope.status, "headers": [list(h) for h in envelope.headers], "body": envelope.body,
                   "outcome": envelope.outcome, "error_code": envelope.error_code,
                   "error_message": envelope.error_message, "retryable": envelope.retryable})}
    return decoded, status


def archive_receipts(app: Any, archives: Archives, out: Path, chosen: Sequence[ExpiredReceipt], *,
                     now: datetime, provenance: Mapping[str, Any]) -> tuple[Segment, int]:
    """Write, verify and record a segment of ``chosen`` receipts (their index rows in the same
    transaction as the segment's).

    Returns:
        ``(segment, records)``.

    Raises:
        ArchiveError: the written segment does not verify (nothing is recorded or removed).
    """
    records = [record for receipt in chosen for record in receipt.records]
    decoded: list[dict[str, Any]] = []
    statuses: list[dict[str, Any]] = []
    for receipt in chosen:
        lines, status = receipt_lines(app, receipt)
        decoded += lines
        statuses.append(status)
    segment = write_segment(out, records=records, decoded=decoded, statuses=statuses, written_at=now,
                            provenance=provenance)
    if problems := verify_segment(segment.path):
        raise ArchiveError(f"{segment.path.name} does not verify after writing, nothing removed: "
                           + "; ".join(problems))
    archives.archive_record(RecordedSegment(segment.number, segment.digest,
                                            summary_of(statuses, segment_metrics(app, records))),
                            aggregates=len(statuses), records=len(records), archived_at=now, operations=[],
                            receipts=[(r.receipt.id, r.records[-1].originator_version) for r in chosen])
    failpoints.reached("archive_record:after")
    return segment, len(records)
