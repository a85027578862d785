"""The archive run: move closed operations out of the hot store into verified segments.

Each step is idempotent, in the order docs/adr/0010-archives.md §3 decides:

1. finish what a killed run left: a complete segment on disk the store did not record is
   verified and recorded (or, when it no longer verifies, removed and written again), and the
   records of recorded operations still in the hot store are removed;
2. select candidates (``adapters.archive_select``: the store driver's, each confirmed by
   ``ledger.retention.is_archivable`` against its integration's cutoff);
3. write a segment (``ledger.archives.write_segment``: ``.partial``, flushed, renamed), re-read
   and verify it (``ledger.archive_check.verify_segment``);
4. record the segment, its carried-forward summary and an index row per operation in one
   transaction (``Archives.archive_record``);
5. remove the operations' records and status rows in bounded batches, each its own transaction
   (``Archives.archive_remove``), only up to the version archived;
6. the same for expired idempotency receipts (``adapters.archive_receipts``): selected, written
   into segments of their own with their final envelope, recorded, removed.

Nothing is removed that is not in a verified, recorded segment, and an id in the index is never
selected again, so a rerun never archives an id twice.

Source: issue 29 items 2 and 5; docs/adr/0010-archives.md.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from adapters.archive_reads import decoded_events
from adapters.archive_select import key_of, select
from adapters.operator import entries_of
from adapters.pacing import Pacer
from ledger import failpoints
from ledger.archive_check import verify_segment
from ledger.archives import (
    ArchiveError,
    Segment,
    StoredRecord,
    manifest_digest,
    read_manifest,
    read_records,
    read_statuses,
    segments,
    write_segment,
)
from ledger.errors import CorruptRecordError
from migrations.drivers import ArchiveCandidate, ArchiveLabels, Archives, EventLoads, RecordedSegment
from projections.metrics import MetricsFold, history_increments
from projections.metrics_store import LabelKey
from projections.view import StatusView

SEGMENT_OPERATIONS = 1_000
"""Operations per segment, at most: a segment is written, verified and recorded whole."""
REMOVE_BATCH = 100
"""Operations whose records one removal transaction deletes: bounded, so workers and ``serve``
writing beside the run never wait long on it."""


@dataclass
class ArchiveReport:
    """What a run did (or, dry, would do).

    Attributes:
        dry_run: nothing was written or removed.
        operations: operations archived (or archivable, dry).
        records: their stored records.
        segments: the numbers of the segments written or recovered.
        removed: operations whose records and status rows were removed.
        by_integration: operations per integration.
        receipts: expired receipts archived (or archivable, dry; ``adapters.archive_receipts``).
        receipts_removed: expired receipts whose records were removed.
    """

    dry_run: bool
    operations: int = 0
    records: int = 0
    segments: list[int] = field(default_factory=list)
    removed: int = 0
    by_integration: Counter[str] = field(default_factory=Counter)
    receipts: int = 0
    receipts_removed: int = 0

    def as_json(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {"dry_run": self.dry_run, "operations": self.operations, "records": self.records,
                "segments": self.segments, "removed": self.removed, "by_integration": dict(self.by_integration),
                "receipts": self.receipts, "receipts_removed": self.receipts_removed}


def totals_of(statuses: Sequence[Mapping[str, Any]]) -> Counter[ArchiveLabels]:
    """A segment's operations by ``(final status, integration, tenant, delivery mode)``: what the
    status totals and the ``opledger_operations`` gauge carry forward for them."""
    return Counter((str(s.get("status")), str(s.get("integration")), str(s.get("tenant")),
                    str(s.get("delivery_mode"))) for s in statuses if s.get("kind") == "operation")


def summary_of(statuses: Sequence[Mapping[str, Any]], metrics: Mapping[LabelKey, float]) -> str:
    """The carried-forward summary recorded with a segment, JSON text: its operations by final
    status (``{"status": {"settled": 3, ...}}``) and by label set (``"by_labels": [[status,
    integration, tenant, delivery_mode, n], ...]``), as added to the store's carried-forward
    totals, and the metric increments its records made (``"metrics": [[name, integration,
    tenant, delivery_mode, detail, value], ...]``, :func:`segment_metrics`), which a rebuild of
    the metrics projection starts from (``projections.metrics.carried_forward``;
    docs/adr/0010-archives.md, "As built")."""
    totals = totals_of(statuses)
    by_status: Counter[str] = Counter()
    for (status, *_), n in totals.items():
        by_status[status] += n
    return json.dumps({"status": dict(sorted(by_status.items())),
                       "by_labels": [[*key, n] for key, n in sorted(totals.items())],
                       "metrics": [[*key, value] for key, value in sorted(metrics.items())]}, sort_keys=True)


def segment_metrics(app: Any, records: Iterable[StoredRecord]) -> dict[LabelKey, float]:
    """The metric increments of a segment's ``records`` (complete histories, in order), as the
    metrics projection folded them (``projections.metrics.history_increments``)."""
    return history_increments(app, ((r.originator_id, r.originator_version, r.topic, r.state) for r in records))


def recover(app: Any, archives: Archives, out: Path) -> list[int]:
    """Step 1 of a run: record a complete segment a killed run wrote but did not record (it is
    verified first; one that does not verify is removed, to be written again), and check the
    archive directory is the one the store recorded.

    Returns:
        The numbers of the segments recorded now.

    Raises:
        ArchiveError: ``out`` lacks a segment the store recorded, or holds one whose digest
            differs from the recorded one (not this store's archive, or tampered with).
    """
    recorded = {s.segment: s.digest for s in archives.archive_segments()}
    on_disk = dict(segments(out))
    last = max(recorded, default=0)
    if last and (last not in on_disk or manifest_digest(on_disk[last]) != recorded[last]):
        raise ArchiveError(f"{out} does not hold segment {last} as this store recorded it: pass the "
                           "store's archive directory as --out (`opledger archive verify` checks it)")
    done = []
    for number in sorted(n for n in on_disk if n > last):
        path = on_disk[number]
        if verify_segment(path):
            shutil.rmtree(path)  # never recorded, so nothing was removed on its strength
            continue
        statuses = read_statuses(path)
        versions: dict[UUID, int] = {}
        held = list(read_records(path))
        for record in held:
            versions[record.originator_id] = max(versions.get(record.originator_id, 0), record.originator_version)
        written_at = datetime.fromisoformat(str(read_manifest(path)["written_at"]))
        kinds = {kind: [(UUID(str(s["id"])), versions[UUID(str(s["id"]))], str(s["status"]))
                        for s in statuses if s.get("kind") == kind] for kind in ("operation", "receipt")}
        _record(archives, Segment(number, path, manifest_digest(path)), statuses, sum(versions.values()),
                kinds["operation"], written_at, segment_metrics(app, held),
                [(rid, version) for rid, version, _ in kinds["receipt"]])
        done.append(number)
    return done


def _record(archives: Archives, segment: Segment, statuses: Sequence[Mapping[str, Any]], records: int,
            operations: Sequence[tuple[UUID, int, str]], at: datetime, metrics: Mapping[LabelKey, float],
            receipts: Sequence[tuple[UUID, int]] = ()) -> None:
    archives.archive_record(RecordedSegment(segment.number, segment.digest, summary_of(statuses, metrics)),
                            aggregates=len(statuses), records=records, archived_at=at, operations=operations,
                            receipts=receipts)


def remove_archived(archives: Archives, progress: Callable[[int], None] | None = None) -> int:
    """Step 5 (and its resumption): remove the records and status rows of every recorded
    operation still in the hot store, :data:`REMOVE_BATCH` per transaction.

    Returns:
        How many operations were removed.
    """
    removed = 0
    while batch := archives.archive_unremoved(REMOVE_BATCH):
        removed += archives.archive_remove(batch)
        failpoints.reached("archive_remove:after")
        if progress is not None:
            progress(removed)
    return removed


def remove_segment(archives: Archives, archived: Sequence[ArchiveCandidate],
                   pace: Callable[[], None] = lambda: None) -> int:
    """Step 5 for the segment just recorded: remove its operations, :data:`REMOVE_BATCH` per
    transaction. Only those: looking for every recorded operation still in the hot store
    (:func:`remove_archived`) reads the whole archive index, once per batch, which grew
    quadratic with the archive (177 operations a second by 143,000 archived, from 1,000,000).
    A run killed meanwhile leaves the rest to the next run's :func:`remove_archived`.

    Args:
        pace: called after each batch (``adapters.pacing.Pacer.step``).

    Returns:
        How many operations were removed (one with a late record stays whole: not counted).
    """
    removed = 0
    for start in range(0, len(archived), REMOVE_BATCH):
        batch = archived[start:start + REMOVE_BATCH]
        removed += archives.archive_remove([(c.operation_id, c.version) for c in batch])
        failpoints.reached("archive_remove:after")
        pace()
    return removed


def remove_archived_receipts(archives: Archives) -> int:
    """Step 5 for expired receipts (and its resumption): remove the records of every recorded
    receipt generation still in the store, :data:`REMOVE_BATCH` per transaction.

    Returns:
        How many receipt generations were removed or kept whole.
    """
    removed = 0
    while batch := archives.archive_receipts_unremoved(REMOVE_BATCH):
        archives.archive_receipts_remove(batch)
        failpoints.reached("archive_remove:after")
        removed += len(batch)
    return removed


def archive_segment(app: Any, view: StatusView, archives: Archives, out: Path, chosen: Sequence[ArchiveCandidate], *,
                    now: datetime, provenance: Mapping[str, Any]) -> tuple[Segment, list[ArchiveCandidate], int] | None:
    """Steps 3 and 4 for one batch: write, verify and record a segment of ``chosen``.

    An operation whose stored history moved on since it was selected (a record past the status
    row's version) is left for a later run.

    Returns:
        ``(segment, the candidates archived, records)``, or None when none of ``chosen`` could be archived.

    Raises:
        ArchiveError: the written segment does not verify (nothing is recorded or removed).
    """
    loads: EventLoads = app_driver(app)
    rows = loads.events_list_many([c.operation_id for c in chosen])
    by_id: dict[UUID, list[StoredRecord]] = {}
    for op_id, version, topic, state in rows:
        by_id.setdefault(op_id, []).append(StoredRecord(op_id, version, topic, bytes(state)))
    records: list[StoredRecord] = []
    decoded: list[dict[str, Any]] = []
    statuses: list[dict[str, Any]] = []
    operations: list[tuple[UUID, int, str]] = []
    archived: list[ArchiveCandidate] = []
    rows_now = view.get_many([c.operation_id for c in chosen])  # one read per segment, not one per operation
    fold = MetricsFold(app, cache_size=1)  # one history at a time: only the one being folded is kept
    metrics: dict[LabelKey, float] = defaultdict(float)
    for candidate in chosen:
        held = by_id.get(candidate.operation_id, [])
        status = rows_now.get(candidate.operation_id)
        if not held or held[-1].originator_version != candidate.version or status is None \
                or status.version != candidate.version:
            continue
        # Decoded once, from the records just read, for the timeline (as ``ops timeline`` gives
        # it) and the metrics carried forward; a record that does not decode keeps it here.
        made: dict[LabelKey, float] = defaultdict(float)
        try:
            events = decoded_events(app, held)
            for event in events:
                fold.add(made, event)
        except CorruptRecordError:
            continue
        for key, value in made.items():
            metrics[key] += value
        entries = entries_of(app, events)
        records.extend(held)
        decoded.extend({"id": str(candidate.operation_id), **entry} for entry in entries)
        statuses.append({"id": str(candidate.operation_id), "kind": "operation", **status.as_json()})
        operations.append((candidate.operation_id, candidate.version, candidate.status))
        archived.append(candidate)
    if not operations:
        return None
    segment = write_segment(out, records=records, decoded=decoded, statuses=statuses, written_at=now,
                            provenance=provenance)
    if problems := verify_segment(segment.path):
        raise ArchiveError(f"{segment.path.name} does not verify after writing, nothing removed: "
                           + "; ".join(problems))
    _record(archives, segment, statuses, len(records), operations, now, metrics)
    failpoints.reached("archive_record:after")
    return segment, archived, len(records)


def app_driver(app: Any) -> EventLoads:
    """The store driver's event loads of ``app`` (``migrations.drivers.driver_of``)."""
    from migrations.drivers import driver_of

    return driver_of(app)


def run_archive(app: Any, view: StatusView, archives: Archives, out: Path, *, now: datetime,
                limits: Mapping[str, datetime], provenance: Mapping[str, Any], dry_run: bool = False,
                progress: Callable[[int], None] | None = None, pacer: Pacer | None = None) -> ArchiveReport:
    """One archive run (the module's steps 1 to 5).

    Args:
        app: the host application over the store.
        view: the store's status view (each operation's final status).
        archives: the store's driver (``migrations.drivers.archives_of``).
        out: the archive directory.
        now: the run's time, UTC (injected): the segments' ``written_at`` and ``archived_at``.
        limits: ``{integration: cutoff}`` (:func:`cutoffs`).
        provenance: the manifest's store identity, schema and codec versions, opledger's
            version and commit (``ledger.archives.write_segment``).
        dry_run: only count what would be archived; nothing is written, recorded or removed.
        progress: called with the operations archived so far.
        pacer: paces the run beside live traffic (``adapters.pacing``): a step after each
            segment is written and recorded and after each removal batch; None runs flat out.

    Returns:
        What was done.

    Raises:
        ArchiveError: the archive directory is not the store's, or a segment does not verify.
    """
    from adapters.archive_receipts import archive_receipts, select_receipts

    report = ArchiveReport(dry_run=dry_run)
    latest = max(limits.values())
    if dry_run:
        for row in select(archives, limits):
            report.operations += 1
            report.by_integration[row.integration] += 1
        report.receipts = len(select_receipts(app, archives, latest, limit=2**62))
        return report
    report.segments.extend(recover(app, archives, out))
    report.removed += remove_archived(archives)
    report.receipts_removed += remove_archived_receipts(archives)
    pace = pacer.step if pacer is not None else lambda: None
    # Each segment's selection goes on from where the last one ended: from the oldest each time
    # it would read again every row a cutoff kept and every index entry removal left behind,
    # a cost that grows with the run (the square of the store's size over a whole run).
    # Within a run the cutoffs stay put, and an operation that changes moves to the end.
    after: tuple[datetime, UUID] | None = None
    while chosen := select(archives, limits, limit=SEGMENT_OPERATIONS, after=after):
        after = key_of(chosen[-1])
        written = archive_segment(app, view, archives, out, chosen, now=now, provenance=provenance)
        if written is None:
            break  # every candidate moved on since selected: a later run takes them
        pace()
        segment, archived, records = written
        report.segments.append(segment.number)
        report.operations += len(archived)
        report.records += records
        report.by_integration.update(c.integration for c in archived)
        report.removed += remove_segment(archives, archived, pace)
        if progress is not None:
            progress(report.operations)
    while expired := select_receipts(app, archives, latest, limit=SEGMENT_OPERATIONS):
        segment, records = archive_receipts(app, archives, out, expired, now=now, provenance=provenance)
        report.segments.append(segment.number)
        report.receipts += len(expired)
        report.records += records
        report.receipts_removed += remove_archived_receipts(archives)
    return report
