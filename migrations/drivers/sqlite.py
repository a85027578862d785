"""The SQLite store driver: one process owns the file, ids are stored as text (ADR 0008).

Runs the named queries of ``migrations/sqlite/queries`` on the library's recorder connection.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from ledger.errors import ConfigurationError
from ledger.store_files import check_store_files, create_store_file
from ledger.store_identity import STORE_TABLE
from migrations.drivers.database import ConfiguredStore
from migrations.drivers.owned import OwnedStore
from migrations.drivers.protocols import ArchiveCandidate, ArchiveLabels, EventRow, OpenIntents, Record, RecordedSegment
from migrations.drivers.protocols import LateRecord as LateRow
from migrations.drivers.queries import load_queries

MAX_IDS_PER_QUERY = 500
"""Ids bound in one statement, at most: keeps SQLite under its bound-parameter limit."""


class SQLiteDriver(OwnedStore):
    """The driver of a store in one SQLite file.

    Args:
        recorder: the library's SQLite application recorder of the store.
    """

    name = "sqlite"

    def __init__(self, recorder: Any) -> None:
        self._recorder = recorder
        self._queries = load_queries(self.name)
        self._table = recorder.events_table_name

    def _select(self, sql: str, params: Sequence[Any], *, tuples: bool = False) -> list[Any]:
        with self._recorder.datastore.transaction(commit=False) as cursor:
            if tuples:
                cursor.sqlite_cursor.row_factory = None  # plain tuples
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def _ids(self, rows: list[Any]) -> list[EventRow]:
        convert = self._recorder.convert_originator_id
        return [(convert(text_id), version, topic, bytes(state)) for text_id, version, topic, state in rows]

    def events_list_many(self, ids: Collection[UUID]) -> list[EventRow]:
        """See ``EventLoads.events_list_many``."""
        wanted = list(dict.fromkeys(ids))
        found: list[EventRow] = []
        for start in range(0, len(wanted), MAX_IDS_PER_QUERY):
            chunk = wanted[start:start + MAX_IDS_PER_QUERY]
            sql = self._queries["select_events_of_many"].format(table=self._table, ids=",".join("?" * len(chunk)))
            found.extend(self._ids(self._select(sql, [i.hex for i in chunk], tuples=True)))
        return found

    def records_list_after(self, after: int, limit: int, topics: Sequence[str], ids: dict[Any, UUID], *,
                           prefix: str | None = None) -> list[Record]:
        """See ``LogReads.records_list_after``."""
        sql = self._queries["select_records"].format(table=self._table, topics=",".join("?" * len(topics)))
        records = []
        for position, text_id, version, topic, state in self._select(sql, [after, *topics, prefix, limit], tuples=True):
            originator_id = ids.get(text_id)
            if originator_id is None:
                originator_id = ids[text_id] = self._recorder.convert_originator_id(text_id)
            records.append((position, originator_id, version, topic, state))
        return records

    def intents_list_open(self, after: int, limit: int, topics: Sequence[str], ids: dict[Any, UUID]) -> OpenIntents:
        """See ``LogReads.intents_list_open``: every intent, closed ones included."""
        return OpenIntents(self.records_list_after(after, limit, topics, ids), None)

    def store_probe(self, probe_id: UUID, topic: str, state: bytes) -> None:
        """See ``StoreProbes.store_probe``: on the writer's connection (the library's
        reader-writer interlock), rolled back at the end."""
        sql = self._queries["probe_insert"].format(table=self._table)
        with self._recorder.datastore.get_connection(commit=True) as conn, conn.transaction(commit=False) as cursor:
            cursor.execute(sql, [probe_id.hex, topic, state])

    def topics_count_stored(self, prefix: str, topics: Sequence[str] = ()) -> dict[str, int]:
        """See ``TopicCounts.topics_count_stored``."""
        wanted = list(dict.fromkeys(topics))
        sql = self._queries["stored_ledger_topics"].format(table=self._table, topics=",".join("?" * len(wanted)))
        return {str(topic): int(count) for topic, count in self._select(sql, [prefix, *wanted], tuples=True)}

    def intents_list_live(self, topics: Sequence[str], projection: str, upstream: str) -> list[EventRow]:
        """See ``TopicCounts.intents_list_live``."""
        sql = self._queries["select_intents_live"].format(table=self._table, topics=",".join("?" * len(topics)))
        return self._ids(self._select(sql, [*topics, projection, upstream, *topics], tuples=True))


    # -- Archives (docs/adr/0010-archives.md §3)
    def _write(self) -> Any:
        return self._recorder.datastore.transaction(commit=True)

    def archive_candidates(self, before: datetime, after: tuple[datetime, UUID] | None,
                           limit: int) -> list[ArchiveCandidate]:
        """See ``Archives.archive_candidates``."""
        start = (_time(after[0]), str(after[1])) if after else ("", "")
        rows = self._select(self._queries["archive_candidates"], [_time(before), *start, limit], tuples=True)
        return [ArchiveCandidate(UUID(op_id), version, integration, status, execution, settlement, disposition,
                                 attention, datetime.fromisoformat(updated_at))
                for op_id, version, integration, status, execution, settlement, disposition, attention, updated_at
                in rows]

    def archive_record(self, segment: RecordedSegment, *, aggregates: int, records: int, archived_at: datetime,
                       operations: Sequence[tuple[UUID, int, str]],
                       receipts: Sequence[tuple[UUID, int]] = ()) -> None:
        """See ``Archives.archive_record``."""
        at = _time(archived_at)
        with self._write() as cursor:
            cursor.execute(self._queries["archive_insert_segment"],
                           [segment.segment, segment.digest, aggregates, records, segment.summary, at])
            if cursor.sqlite_cursor.rowcount == 0:  # the library's cursor wraps sqlite3's
                return  # recorded already, with its index
            for operation_id, version, status in operations:
                cursor.execute(self._queries["archive_insert_operation"],
                               [str(operation_id), segment.segment, version, status, at])
            for receipt_id, version in receipts:
                cursor.execute(self._queries["archive_insert_receipt"], [str(receipt_id), segment.segment, version, at])

    def archive_segments(self) -> list[RecordedSegment]:
        """See ``Archives.archive_segments``."""
        return [RecordedSegment(int(n), str(d), str(s), int(r))
                for n, d, s, r in self._select(self._queries["archive_select_segments"], [], tuples=True)]

    def archive_lookup(self, ids: Collection[UUID]) -> dict[UUID, tuple[int, str]]:
        """See ``Archives.archive_lookup``."""
        wanted = [str(i) for i in dict.fromkeys(ids)]
        found: dict[UUID, tuple[int, str]] = {}
        for start in range(0, len(wanted), MAX_IDS_PER_QUERY):
            chunk = wanted[start:start + MAX_IDS_PER_QUERY]
            sql = self._queries["archive_select_archived"].format(ids=",".join("?" * len(chunk)))
            found.update({UUID(i): (int(n), str(status)) for i, n, status in self._select(sql, chunk, tuples=True)})
        return found

    def archive_unremoved(self, limit: int) -> list[tuple[UUID, int]]:
        """See ``Archives.archive_unremoved``."""
        sql = self._queries["archive_select_unremoved"].format(table=self._table)
        return [(UUID(i), int(v)) for i, v in self._select(sql, [limit], tuples=True)]

    def archive_remove(self, operations: Sequence[tuple[UUID, int]]) -> int:
        """See ``Archives.archive_remove``."""
        events = self._queries["archive_delete_events"].format(table=self._table)
        later = self._queries["archive_select_later"].format(table=self._table)
        gone: Counter[ArchiveLabels] = Counter()
        with self._write() as cursor:
            for operation_id, version in operations:
                cursor.execute(later, [operation_id.hex, version])
                if cursor.fetchone() is not None:
                    continue  # a late record: the operation stays whole (ADR 0010 §4)
                cursor.execute(events, [operation_id.hex, version])
                cursor.execute(self._queries["archive_delete_status"], [str(operation_id), version])
                gone.update(tuple(row) for row in cursor.fetchall())
            cursor.executemany(self._queries["archive_add_totals"], [(*key, n) for key, n in sorted(gone.items())])
        return sum(gone.values())

    def archive_late_record(self, record: LateRow) -> bool:
        """See ``Archives.archive_late_record``."""
        with self._write() as cursor:
            cursor.execute(self._queries["archive_insert_late"],
                           [str(record.operation_id), *record[1:7], _time(record.received_at)])
            return bool(cursor.sqlite_cursor.rowcount)

    def archive_late_list(self, limit: int) -> list[LateRow]:
        """See ``Archives.archive_late_list``."""
        rows = self._select(self._queries["archive_select_late"], [limit], tuples=True)
        return [LateRow(UUID(op_id), callback_id, int(segment), integration, outcome, remote_status, detail,
                        datetime.fromisoformat(at))
                for op_id, callback_id, segment, integration, outcome, remote_status, detail, at in rows]

    def archive_late_acknowledge(self, operation_id: UUID, *, principal: str, evidence: str, at: datetime) -> int:
        """See ``Archives.archive_late_acknowledge``."""
        with self._write() as cursor:
            cursor.execute(self._queries["archive_acknowledge_late"],
                           [_time(at), principal, evidence, str(operation_id)])
            return int(cursor.sqlite_cursor.rowcount)

    def archive_receipts_held(self, ids: Collection[UUID]) -> set[UUID]:
        """See ``Archives.archive_receipts_held``."""
        wanted = [str(i) for i in dict.fromkeys(ids)]
        held: set[UUID] = set()
        for start in range(0, len(wanted), MAX_IDS_PER_QUERY):
            chunk = wanted[start:start + MAX_IDS_PER_QUERY]
            sql = self._queries["archive_select_receipts_held"].format(ids=",".join("?" * len(chunk)))
            held.update(UUID(i) for (i,) in self._select(sql, chunk, tuples=True))
        return held

    def archive_receipts_unremoved(self, limit: int) -> list[tuple[UUID, int, int]]:
        """See ``Archives.archive_receipts_unremoved``."""
        rows = self._select(self._queries["archive_select_receipts_unremoved"], [limit], tuples=True)
        return [(UUID(i), int(segment), int(version)) for i, segment, version in rows]

    def archive_receipts_remove(self, receipts: Sequence[tuple[UUID, int, int]]) -> None:
        """See ``Archives.archive_receipts_remove``."""
        events = self._queries["archive_delete_events"].format(table=self._table)
        later = self._queries["archive_select_later"].format(table=self._table)
        with self._write() as cursor:
            for receipt_id, segment, version in receipts:
                cursor.execute(later, [receipt_id.hex, version])
                kept = cursor.fetchone() is not None  # reopened since: kept whole (ADR 0010 §4)
                if not kept:
                    cursor.execute(events, [receipt_id.hex, version])
                cursor.execute(self._queries["archive_mark_receipt"], [2 if kept else 1, str(receipt_id), segment])


def _time(value: datetime) -> str:
    """A time as the status view stores it: UTC, fixed width, so text order is time order."""
    return value.astimezone(UTC).isoformat(timespec="microseconds")

class SQLiteDatabase(ConfiguredStore):
    """The database-level driver of a store in one SQLite file: one process owns it."""

    name, shared, log_gapless = "sqlite", False, True

    def store_prepare(self) -> None:
        """See ``DatabaseDriver.store_prepare``. Run under the store's lock, which checked the
        path and made the directory 0700: the file 0600 first (SQLite gives its WAL and index
        the same mode), then a damaged one is refused."""
        path = self._database.path
        assert path is not None  # parsed SQLite URLs always have a path
        create_store_file(path)
        check_store_files(path, thorough=True)
        try:
            conn = sqlite3.connect(path)
            try:
                mode = conn.execute(load_queries(self.name)["set_journal_wal"]).fetchone()[0]
            finally:
                conn.close()
        except (OSError, sqlite3.DatabaseError) as exc:
            raise ConfigurationError(f"{path} cannot be used as an SQLite store: {exc}") from None
        if str(mode).lower() != "wal":
            raise ConfigurationError(f"cannot put {path} in WAL mode (got {mode})")

    def identity_record(self, *, defaults: Mapping[str, str], current: Mapping[str, str],
                        check: Callable[[dict[str, str]], None]) -> str:
        """See ``DatabaseDriver.identity_record``."""
        queries = {name: load_queries(self.name)[name].format(table=STORE_TABLE)
                   for name in ("select_identity", "insert_identity", "upsert_identity")}
        conn = sqlite3.connect(str(self._database.path))
        try:
            with conn:
                check(dict(conn.execute(queries["select_identity"]).fetchall()))
                conn.executemany(queries["insert_identity"], defaults.items())
                conn.executemany(queries["upsert_identity"], current.items())
                return str(dict(conn.execute(queries["select_identity"]).fetchall())["store_id"])
        finally:
            conn.close()

    def autovacuum(self) -> bool | None:
        """None: SQLite has no vacuum process (``DatabaseDriver.autovacuum``)."""
        return None

    def journal_mode(self) -> str | None:
        """See ``DatabaseDriver.journal_mode``: on a read-only connection of its own."""
        conn = sqlite3.connect(f"file:{self.store_file}?mode=ro", uri=True)
        try:
            return str(conn.execute(load_queries(self.name)["select_journal_mode"]).fetchone()[0]).lower()
        finally:
            conn.close()

    def describe(self) -> str:
        """See ``DatabaseDriver.describe``."""
        return f"SQLite {self._database.path}"

    def schema_drop(self) -> None:
        """Nothing: the store is a file of its own (``DatabaseDriver.schema_drop``)."""

    def wakeups_start(self, wakeups: Mapping[str, Sequence[Callable[[str], None]]], stop: threading.Event) -> bool:
        """False: one process owns the store, and its worker is woken in process."""
        return False

    def status_channel(self) -> str:
        """See ``DatabaseDriver.status_channel`` (never notified here)."""
        return "opledger_status"


def wal_checkpoint(path: Path) -> tuple[int, int]:
    """Checkpoint the WAL of the SQLite file at ``path`` into the file and empty it, on a
    connection of its own (``checkpoint_wal.sql``).

    Returns:
        ``(busy, frames)``: whether a reader kept the checkpoint from finishing (1) and how many
        frames the WAL still held; ``(0, 0)`` when it is empty now.
    """
    conn = sqlite3.connect(path)
    try:
        busy, frames, _ = conn.execute(load_queries(SQLiteDriver.name)["checkpoint_wal"]).fetchone()
    finally:
        conn.close()
    return int(busy), int(frames)
