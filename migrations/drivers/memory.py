"""The in-memory store driver: the library's POPO recorder, for tests and the simulator
(ADR 0008). There is no query to save here: each method runs the recorder's own methods, and the
conformance suite holds the results to what the SQL drivers return.

Archives (docs/adr/0010-archives.md) are kept as a database keeps them: the index, segments,
archived receipts and late records in the driver's own tables (it goes with the store), the
status rows and carried-forward totals beside the status view (:class:`StatusTables`, bound as
:attr:`MemoryDriver.status`). Removing a record leaves its place in the log empty
(:data:`REMOVED_TOPIC`), as a deleted row leaves a gap in the SQL logs.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from migrations.drivers.owned import OwnedStore
from migrations.drivers.protocols import (
    ArchiveCandidate,
    ArchiveLabels,
    EventRow,
    LateRecord,
    OpenIntents,
    Record,
    RecordedSegment,
)

REMOVED_TOPIC = "opledger.removed"
"""The topic of the placeholder a removed record leaves in the recorder's list (its position is
kept, as a deleted row's is in SQL); no reader of this driver returns one, and the recorder of
``migrations.drivers.memory_env`` hides them from the library's own reads too."""

RECEIPT_UNREMOVED, RECEIPT_REMOVED, RECEIPT_KEPT = 0, 1, 2
"""An archived receipt generation's ``removed`` state, as the SQL tables hold it."""


class StatusTables(Protocol):
    """What an archive run reads and changes beside a memory store's log, where a database keeps
    them in tables of its own: the live status rows and the carried-forward totals
    (``projections.memory_view.MemoryStatusStore`` is one)."""

    @property
    def lock(self) -> AbstractContextManager[Any]:
        """Held for each whole read or change (one transaction)."""
        ...

    @property
    def archive_totals(self) -> Counter[ArchiveLabels]:
        """Archived operations by final status and label set, which the status counts add in."""
        ...

    @property
    def tracking(self) -> Mapping[tuple[str, str], int]:
        """Each projection's position by ``(projection, upstream)``."""
        ...

    def status_rows(self) -> MutableMapping[UUID, Any]:
        """The live status rows (``projections.rows.StatusRow``) by operation id."""
        ...


class _NoStatusView:
    """The :class:`StatusTables` of a driver no status view was bound to: no status rows."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.archive_totals: Counter[ArchiveLabels] = Counter()
        self.tracking: dict[tuple[str, str], int] = {}
        self._rows: dict[UUID, Any] = {}

    def status_rows(self) -> MutableMapping[UUID, Any]:
        return self._rows


class _Acknowledged(NamedTuple):
    at: datetime
    principal: str
    evidence: str


class MemoryDriver(OwnedStore):
    """The driver of a store held by the library's in-memory (POPO) recorder.

    Args:
        recorder: the library's POPO application recorder of the store. A recorder with a
            ``probe_insert()`` method (the simulator's, to inject refusals) has it called by
            :meth:`store_probe`; without one a probe is always accepted.
    """

    name = "memory"

    def __init__(self, recorder: Any) -> None:
        self._recorder = recorder
        self.status: StatusTables = _NoStatusView()
        """The status rows and totals the archive methods select, remove and add to: assign the
        in-memory status view's store (``MemoryStatusStore``) of this log. Until then, none."""
        self._lock = threading.Lock()  # the archive tables below; taken before ``status.lock``
        self._segments: dict[int, RecordedSegment] = {}
        self._archived: dict[UUID, tuple[int, int, str]] = {}  # id -> (segment, version, final status)
        self._receipts: dict[tuple[UUID, int], tuple[int, int]] = {}  # (id, segment) -> (version, removed)
        self._late: dict[tuple[UUID, str], LateRecord] = {}
        self._acknowledged: dict[tuple[UUID, str], _Acknowledged] = {}

    def events_list_many(self, ids: Collection[UUID]) -> list[EventRow]:
        """See ``EventLoads.events_list_many``."""
        return [(aggregate_id, stored.originator_version, stored.topic, stored.state)
                for aggregate_id in dict.fromkeys(ids) for stored in self._recorder.select_events(aggregate_id)]

    def records_list_after(self, after: int, limit: int, topics: Sequence[str], ids: dict[Any, UUID], *,
                           prefix: str | None = None) -> list[Record]:
        """See ``LogReads.records_list_after``: the library's own ``select_notifications``."""
        records: list[Record] = []
        if not topics and prefix is None:
            return records  # as ``topic IN ()`` selects nothing
        position = after
        while len(records) < limit:
            # Without a prefix the library filters by topic; with one, every topic is read and
            # filtered here (the library has no prefix filter).
            page = self._recorder.select_notifications(position, limit if prefix is None else max(limit, 100),
                                                       topics=() if prefix is not None else topics,
                                                       inclusive_of_start=False)
            if not page:
                break
            for n in page:
                position = n.id
                if prefix is not None and (n.topic == REMOVED_TOPIC
                                           or n.topic not in topics and not n.topic.startswith(prefix)):
                    continue
                originator_id = n.originator_id
                if not isinstance(originator_id, UUID):
                    originator_id = ids.get(originator_id) or ids.setdefault(originator_id, UUID(str(originator_id)))
                records.append((n.id, originator_id, n.originator_version, n.topic, n.state))
                if len(records) >= limit:
                    break
            if prefix is None:
                break
        return records

    def intents_list_open(self, after: int, limit: int, topics: Sequence[str], ids: dict[Any, UUID]) -> OpenIntents:
        """See ``LogReads.intents_list_open``: every intent, closed ones included."""
        return OpenIntents(self.records_list_after(after, limit, topics, ids), None)

    def store_probe(self, probe_id: UUID, topic: str, state: bytes) -> None:
        """See ``StoreProbes.store_probe``: nothing to append to; the simulator's recorder may
        refuse through its own ``probe_insert``."""
        probe = getattr(self._recorder, "probe_insert", None)
        if probe is not None:
            probe()

    def _all(self) -> list[Any]:
        return [n for n in self._recorder.select_notifications(0, 2**62, inclusive_of_start=False)
                if n.topic != REMOVED_TOPIC]

    def topics_count_stored(self, prefix: str, topics: Sequence[str] = ()) -> dict[str, int]:
        """See ``TopicCounts.topics_count_stored``."""
        wanted = set(topics)
        return dict(Counter(n.topic for n in self._all() if n.topic.startswith(prefix) or n.topic in wanted))

    def intents_list_live(self, topics: Sequence[str], projection: str, upstream: str) -> list[EventRow]:
        """See ``TopicCounts.intents_list_live``: the bound status rows (:attr:`status`)."""
        wanted = set(topics)
        with self.status.lock:
            due = {op_id for op_id, row in self.status.status_rows().items() if row.next_due_at is not None}
            after = self.status.tracking.get((projection, upstream), 0)
        return [(n.originator_id, n.originator_version, n.topic, n.state) for n in self._all()
                if n.topic in wanted and (n.originator_id in due or n.id > after)]

    # -- Archives (docs/adr/0010-archives.md §3), as the SQL drivers' ``archive_*.sql``
    def archive_candidates(self, before: datetime, after: tuple[datetime, UUID] | None,
                           limit: int) -> list[ArchiveCandidate]:
        """See ``Archives.archive_candidates``: the bound status rows (:attr:`status`)."""
        with self._lock, self.status.lock:
            rows = [row for row in self.status.status_rows().values()
                    if _looks_closed(row) and row.updated_at < before and row.operation_id not in self._archived
                    and (after is None or (row.updated_at, row.operation_id) > after)]
        rows.sort(key=lambda row: (row.updated_at, row.operation_id))
        return [ArchiveCandidate(row.operation_id, row.version, row.integration, row.status, row.execution,
                                 row.settlement, row.disposition, row.attention, row.updated_at)
                for row in rows[:limit]]

    def archive_record(self, segment: RecordedSegment, *, aggregates: int, records: int, archived_at: datetime,
                       operations: Sequence[tuple[UUID, int, str]],
                       receipts: Sequence[tuple[UUID, int]] = ()) -> None:
        """See ``Archives.archive_record``. ``aggregates`` and ``archived_at`` are kept by the SQL
        tables for people reading them; no method reads them back, so they are not kept here."""
        with self._lock, self.status.lock:
            if segment.segment in self._segments:
                return  # recorded already, with its index
            self._segments[segment.segment] = segment._replace(records=records)
            for operation_id, version, status in operations:
                self._archived.setdefault(operation_id, (segment.segment, version, status))
            for receipt_id, version in receipts:
                self._receipts.setdefault((receipt_id, segment.segment), (version, RECEIPT_UNREMOVED))

    def archive_segments(self) -> list[RecordedSegment]:
        """See ``Archives.archive_segments``."""
        with self._lock:
            return [self._segments[n] for n in sorted(self._segments)]

    def archive_lookup(self, ids: Collection[UUID]) -> dict[UUID, tuple[int, str]]:
        """See ``Archives.archive_lookup``."""
        with self._lock:
            return {i: (found[0], found[2]) for i in ids if (found := self._archived.get(i)) is not None}

    def archive_unremoved(self, limit: int) -> list[tuple[UUID, int]]:
        """See ``Archives.archive_unremoved``: those whose bound status row is still there."""
        found: list[tuple[UUID, int]] = []
        with self._lock, self.status.lock:
            rows = self.status.status_rows()
            for operation_id in sorted(self._archived):
                if len(found) >= limit:
                    break
                version = self._archived[operation_id][1]
                row = rows.get(operation_id)
                if row is not None and row.version <= version and not self._later(operation_id, version):
                    found.append((operation_id, version))
        return found

    def archive_remove(self, operations: Sequence[tuple[UUID, int]]) -> int:
        """See ``Archives.archive_remove``."""
        removed = 0
        with self._lock, self.status.lock, self._recorder._database_lock:
            rows = self.status.status_rows()
            for operation_id, version in operations:
                if not self._remove_records(operation_id, version):
                    continue  # a late record: the operation stays whole (ADR 0010 §4)
                row = rows.get(operation_id)
                if row is not None and row.version <= version:
                    del rows[operation_id]
                    self.status.archive_totals[(row.status, row.integration, row.tenant, row.delivery_mode)] += 1
                    removed += 1
        return removed

    def archive_late_record(self, record: LateRecord) -> bool:
        """See ``Archives.archive_late_record``."""
        key = (record.operation_id, record.callback_id)
        with self._lock:
            if key in self._late:
                return False
            self._late[key] = record._replace(received_at=record.received_at.astimezone(UTC))
            return True

    def archive_late_list(self, limit: int) -> list[LateRecord]:
        """See ``Archives.archive_late_list``."""
        with self._lock:
            waiting = [record for key, record in self._late.items() if key not in self._acknowledged]
        waiting.sort(key=lambda r: (r.received_at, r.operation_id, r.callback_id))
        return waiting[:limit]

    def archive_late_acknowledge(self, operation_id: UUID, *, principal: str, evidence: str, at: datetime) -> int:
        """See ``Archives.archive_late_acknowledge``."""
        with self._lock:
            keys = [key for key in self._late if key[0] == operation_id and key not in self._acknowledged]
            for key in keys:
                self._acknowledged[key] = _Acknowledged(at.astimezone(UTC), principal, evidence)
        return len(keys)

    def archive_receipts_held(self, ids: Collection[UUID]) -> set[UUID]:
        """See ``Archives.archive_receipts_held``."""
        wanted = set(ids)
        with self._lock:
            return {receipt_id for (receipt_id, _), (_, removed) in self._receipts.items()
                    if receipt_id in wanted and removed != RECEIPT_REMOVED}

    def archive_receipts_unremoved(self, limit: int) -> list[tuple[UUID, int, int]]:
        """See ``Archives.archive_receipts_unremoved``."""
        with self._lock:
            found = [(receipt_id, segment, version) for (receipt_id, segment), (version, removed)
                     in self._receipts.items() if removed == RECEIPT_UNREMOVED]
        return sorted(found)[:limit]

    def archive_receipts_remove(self, receipts: Sequence[tuple[UUID, int, int]]) -> None:
        """See ``Archives.archive_receipts_remove``."""
        with self._lock, self._recorder._database_lock:
            for receipt_id, segment, version in receipts:
                removed = RECEIPT_REMOVED if self._remove_records(receipt_id, version) else RECEIPT_KEPT
                if (receipt_id, segment) in self._receipts:  # as the UPDATE: no row, nothing marked
                    self._receipts[receipt_id, segment] = (self._receipts[receipt_id, segment][0], removed)

    def _later(self, aggregate_id: UUID, version: int) -> bool:
        """Whether ``aggregate_id`` has a record past ``version`` (``archive_select_later.sql``)."""
        return bool(self._recorder.select_events(aggregate_id, gt=version, limit=1))

    def _remove_records(self, aggregate_id: UUID, version: int) -> bool:
        """Remove ``aggregate_id``'s records up to ``version``, unless it has one past it; return
        whether it had none. Each leaves a placeholder (:data:`REMOVED_TOPIC`) at its position, and
        leaves the recorder's index, so its key can be recorded again (a receipt's id comes back).
        Called under the recorder's lock."""
        if self._later(aggregate_id, version):
            return False
        stored_events: list[StoredEvent] = self._recorder._stored_events
        index: dict[int, int] = self._recorder._stored_events_index[str(aggregate_id)]
        for stored_version in [v for v in index if v <= version]:
            position = index.pop(stored_version)
            stored_events[position] = StoredEvent(originator_id=aggregate_id, originator_version=stored_version,
                                                  topic=REMOVED_TOPIC, state=b"")
        return True


def _looks_closed(row: Any) -> bool:
    """Whether a status row looks closed, as ``archive_candidates.sql`` selects: off the attention
    queue, not pending settlement, and settled, needing no settlement, or abandoned."""
    return (row.attention is None and row.settlement != "pending"
            and (row.settlement in ("settled", "not_required") or row.disposition == "abandoned"))

