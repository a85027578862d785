"""The PostgreSQL store driver: workers of many processes share the store (ADR 0008).

Runs the named queries of ``migrations/postgres/queries`` on the library's recorder pool, with
binary results: states arrive as bytes and ids as UUIDs without the text protocol's hex and
text parsing (1.6-2.0 against 2.8-4.0 µs a record over a 100k log, three runs;
docs/performance.md). Reservations are session-level advisory locks in opledger's own class
(the ones ``PostgresStatusView.reserve`` takes, so every reservation excludes every other),
taken by the statement that reads, on a connection held while they are.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier

from ledger.errors import ConfigurationError
from ledger.store_identity import STORE_TABLE
from migrations.drivers.database import ConfiguredStore
from migrations.drivers.protocols import (
    ArchiveCandidate,
    EventRow,
    LateRecord,
    OpenIntents,
    Record,
    RecordedSegment,
    ReservationHold,
)
from migrations.drivers.queries import load_queries


def open_intents(rows: list[Any], limit: int, elsewhere: frozenset[UUID] = frozenset()) -> OpenIntents:
    """The :class:`OpenIntents` of the rows of ``select_open_intents.sql`` read with ``limit``
    (its last column, whether the read reserved each, is the caller's)."""
    records = [tuple(row[1:6]) for row in rows if row[1] is not None]
    if len(records) >= limit:
        return OpenIntents(records, records[-1][0], elsewhere)
    return OpenIntents(records, rows[0][0] if rows else None, elsewhere)


class PostgresDriver:
    """The driver of a store in a PostgreSQL schema.

    Args:
        recorder: the library's PostgreSQL application recorder of the store.
    """

    name = "postgres"
    intents_only_open = True
    reservations_shared = True

    def __init__(self, recorder: Any) -> None:
        self._recorder = recorder
        self._queries = load_queries(self.name)
        self._schema = f'"{recorder.datastore.schema}"'
        self._table = f'{self._schema}."{recorder.events_table_name}"'

    def _rows(self, query: str, params: list[Any], *, binary: bool = True, prepare: bool = True) -> list[Any]:
        sql = self._queries[query].format(table=self._table, schema=self._schema)
        with self._recorder.datastore.get_connection() as conn, \
                conn.cursor(row_factory=tuple_row, binary=binary) as cursor:
            cursor.execute(sql, params, prepare=prepare)
            return cursor.fetchall()

    def events_list_many(self, ids: Collection[UUID]) -> list[EventRow]:
        """See ``EventLoads.events_list_many``."""
        return self._rows("select_events_of_many", [list(dict.fromkeys(ids))], prepare=False)

    def records_list_after(self, after: int, limit: int, topics: Sequence[str], ids: dict[Any, UUID], *,
                           prefix: str | None = None) -> list[Record]:
        """See ``LogReads.records_list_after`` (ids arrive as ``UUID``: ``ids`` is not needed)."""
        return self._rows("select_records", [after, list(topics), prefix, limit])

    def intents_list_open(self, after: int, limit: int, topics: Sequence[str], ids: dict[Any, UUID]) -> OpenIntents:
        """See ``LogReads.intents_list_open``: only intents their operation recorded nothing
        after. Workers of many processes share the log, and a worker would otherwise load each
        intent another worker claimed only to find it held (docs/performance.md)."""
        return open_intents(self._rows("select_open_intents", [after, list(topics), limit, False]), limit)

    @contextmanager
    def reservations_hold(self) -> Iterator[ReservationHold]:
        """See ``Reservations.reservations_hold``. The locks are released when the block ends,
        whether it raised or not (``reservations_release``); a connection whose reserving
        statement failed (it may have taken locks unseen) is closed, and the server drops them."""
        with self._recorder.datastore.get_connection() as conn, \
                conn.cursor(row_factory=tuple_row, binary=True) as cursor:
            taken = _Hold(cursor, self._table, self._queries)
            try:
                yield taken
            finally:
                if taken.unread:
                    conn.close()  # a reserving statement failed
                else:
                    reservations_release(conn, cursor, self._queries["release_operations"], taken.held)

    def store_probe(self, probe_id: UUID, topic: str, state: bytes) -> None:
        """See ``StoreProbes.store_probe``: through the insert function every append goes
        through (its lock, its NOTIFY, the table's triggers and policies)."""
        call = SQL(self._queries["probe_insert"]).format(function=self._recorder.insert_function)
        with self._recorder.datastore.transaction(commit=False) as cursor:
            cursor.execute(call, [probe_id, topic, state])

    def topics_count_stored(self, prefix: str, topics: Sequence[str] = ()) -> dict[str, int]:
        """See ``TopicCounts.topics_count_stored``."""
        rows = self._rows("stored_ledger_topics", [prefix, list(dict.fromkeys(topics))], binary=False, prepare=False)
        return {str(topic): int(count) for topic, count in rows}

    def intents_list_live(self, topics: Sequence[str], projection: str, upstream: str) -> list[EventRow]:
        """See ``TopicCounts.intents_list_live``."""
        return self._rows("select_intents_live", [list(topics), projection, upstream, list(topics)], prepare=False)


    # -- Archives (docs/adr/0010-archives.md §3)
    def _archive_sql(self, name: str) -> str:
        return self._queries[name].format(schema=self._schema, table=self._table)

    def _archive_rows(self, name: str, params: list[Any]) -> list[Any]:
        with self._recorder.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as cursor:
            cursor.execute(self._archive_sql(name), params)
            return cursor.fetchall()

    def archive_candidates(self, before: datetime, after: tuple[datetime, UUID] | None,
                           limit: int) -> list[ArchiveCandidate]:
        """See ``Archives.archive_candidates``."""
        start = after or (datetime.min.replace(tzinfo=UTC), UUID(int=0))
        rows = self._archive_rows("archive_candidates", [before, *start, limit])
        return [ArchiveCandidate(*row) for row in rows]

    def archive_record(self, segment: RecordedSegment, *, aggregates: int, records: int, archived_at: datetime,
                       operations: Sequence[tuple[UUID, int, str]],
                       receipts: Sequence[tuple[UUID, int]] = ()) -> None:
        """See ``Archives.archive_record``."""
        with self._recorder.datastore.transaction(commit=True) as cursor:
            cursor.execute(self._archive_sql("archive_insert_segment"),
                           [segment.segment, segment.digest, aggregates, records, segment.summary, archived_at])
            if cursor.rowcount == 0:
                return  # recorded already, with its index
            cursor.executemany(self._archive_sql("archive_insert_operation"),
                               [[op_id, segment.segment, version, status, archived_at]
                                for op_id, version, status in operations])
            cursor.executemany(self._archive_sql("archive_insert_receipt"),
                               [[receipt_id, segment.segment, version, archived_at]
                                for receipt_id, version in receipts])

    def archive_segments(self) -> list[RecordedSegment]:
        """See ``Archives.archive_segments``."""
        return [RecordedSegment(*row) for row in self._archive_rows("archive_select_segments", [])]

    def archive_lookup(self, ids: Collection[UUID]) -> dict[UUID, tuple[int, str]]:
        """See ``Archives.archive_lookup``."""
        rows = self._archive_rows("archive_select_archived", [list(dict.fromkeys(ids))])
        return {op_id: (segment, status) for op_id, segment, status in rows}

    def archive_unremoved(self, limit: int) -> list[tuple[UUID, int]]:
        """See ``Archives.archive_unremoved``."""
        return [(op_id, version) for op_id, version in self._archive_rows("archive_select_unremoved", [limit])]

    def archive_remove(self, operations: Sequence[tuple[UUID, int]]) -> int:
        """See ``Archives.archive_remove``: one statement for the batch
        (``archive_remove_operations.sql`` says why)."""
        if not operations:
            return 0
        with self._recorder.datastore.transaction(commit=True) as cursor:
            cursor.execute(self._archive_sql("archive_remove_operations"),
                           [[op_id for op_id, _ in operations], [version for _, version in operations]])
            # The library's transaction cursor gives rows as dicts.
            gone = Counter((r["status"], r["integration"], r["tenant"], r["delivery_mode"]) for r in cursor.fetchall())
            cursor.executemany(self._archive_sql("archive_add_totals"), [[*key, n] for key, n in sorted(gone.items())])
            return sum(gone.values())

    def archive_late_record(self, record: LateRecord) -> bool:
        """See ``Archives.archive_late_record``."""
        with self._recorder.datastore.transaction(commit=True) as cursor:
            cursor.execute(self._archive_sql("archive_insert_late"), list(record))
            return bool(cursor.rowcount)

    def archive_late_list(self, limit: int) -> list[LateRecord]:
        """See ``Archives.archive_late_list``."""
        return [LateRecord(*row) for row in self._archive_rows("archive_select_late", [limit])]

    def archive_late_acknowledge(self, operation_id: UUID, *, principal: str, evidence: str, at: datetime) -> int:
        """See ``Archives.archive_late_acknowledge``."""
        with self._recorder.datastore.transaction(commit=True) as cursor:
            cursor.execute(self._archive_sql("archive_acknowledge_late"), [at, principal, evidence, operation_id])
            return int(cursor.rowcount)

    def archive_receipts_held(self, ids: Collection[UUID]) -> set[UUID]:
        """See ``Archives.archive_receipts_held``."""
        return {receipt_id for (receipt_id,) in self._archive_rows("archive_select_receipts_held",
                                                                   [list(dict.fromkeys(ids))])}

    def archive_receipts_unremoved(self, limit: int) -> list[tuple[UUID, int, int]]:
        """See ``Archives.archive_receipts_unremoved``."""
        return [(receipt_id, segment, version) for receipt_id, segment, version
                in self._archive_rows("archive_select_receipts_unremoved", [limit])]

    def archive_receipts_remove(self, receipts: Sequence[tuple[UUID, int, int]]) -> None:
        """See ``Archives.archive_receipts_remove``: one statement (``archive_remove_receipts.sql``)."""
        if not receipts:
            return
        ids, segments, versions = (list(column) for column in zip(*receipts, strict=True))
        with self._recorder.datastore.transaction(commit=True) as cursor:
            cursor.execute(self._archive_sql("archive_remove_receipts"), [ids, segments, versions])

def reservations_release(conn: Any, cursor: Any, query: str, held: list[UUID]) -> None:
    """Release the advisory locks ``held`` on ``conn`` with ``query`` (``release_operations.sql``),
    now, so another worker can take them at once: a closed connection's locks are dropped only
    when its server process notices, a moment later (a flaky CI run of the conformance suite
    found the gap). When the release itself fails the connection is closed instead, and the
    pool never hands out a connection still holding locks.

    Args:
        conn: the psycopg connection (autocommit) that took the locks.
        cursor: a cursor of ``conn``.
        query: the release statement, taking the ids as its one parameter.
        held: the ids whose locks ``conn`` holds.
    """
    try:
        if held:
            cursor.execute(query, (held,), prepare=True)
    except BaseException:
        conn.close()
        raise


class _Hold:
    """The reserving reads of one held connection (``ReservationHold``).

    Args:
        cursor: a binary, tuple-row cursor of the held connection.
        table: the events table, schema-qualified and quoted.
        queries: the backend's named queries.
    """

    def __init__(self, cursor: Any, table: str, queries: Any) -> None:
        self._cursor = cursor
        self._queries = queries
        self._table = table
        self.held: list[UUID] = []
        self.unread = False
        """Whether a reserving statement was sent and not read to its end: one that failed (a
        statement timeout, a cancel) may have taken locks ``held`` does not list."""

    def intents_reserve_open(self, after: int, limit: int, topics: Sequence[str]) -> OpenIntents:
        """See ``ReservationHold.intents_reserve_open``."""
        self.unread = True
        self._cursor.execute(self._queries["select_open_intents"].format(table=self._table),
                             [after, list(topics), limit, True], prepare=True)
        rows = self._cursor.fetchall()
        self.held.extend(row[2] for row in rows if row[6])
        self.unread = False
        return open_intents(rows, limit, frozenset(row[2] for row in rows if row[6] is False))

    def operations_reserve_current(self, versions: Sequence[tuple[UUID, int]]) -> set[UUID]:
        """See ``ReservationHold.operations_reserve_current``."""
        if not versions:
            return set()
        self.unread = True
        self._cursor.execute(self._queries["reserve_current"].format(table=self._table),
                             [[op_id for op_id, _ in versions], [version for _, version in versions]], prepare=True)
        reserved = [op_id for (op_id,) in self._cursor.fetchall()]
        self.held.extend(reserved)
        self.unread = False
        return set(reserved)


class PostgresDatabase(ConfiguredStore):
    """The database-level driver of a store in a PostgreSQL schema: workers and servers of
    many processes share it, and a sequence numbers its log (rolled-back inserts skip some)."""

    name = "postgres"
    shared = True
    log_gapless = False

    def store_prepare(self) -> None:
        """See ``DatabaseDriver.store_prepare``. The library names types and tables in the
        schema without quoting some of them, so a name PostgreSQL reserves breaks it halfway:
        it is refused up front."""
        import psycopg

        d = self._database
        queries = load_queries(self.name)
        try:
            with psycopg.connect(d.conninfo(connect_timeout=10), autocommit=True) as pg:
                if d.schema:
                    found = pg.execute(queries["select_reserved_keyword"], (d.schema,)).fetchone()
                    if found:
                        raise ConfigurationError(f"schema name {d.schema!r} is a PostgreSQL keyword "
                                                 f"({found[0]}); choose another")
                    pg.execute(SQL(queries["create_schema"]).format(schema=Identifier(d.schema)))
        except psycopg.OperationalError as exc:
            raise d.unreachable(exc) from None

    def identity_record(self, *, defaults: Mapping[str, str], current: Mapping[str, str],
                        check: Callable[[dict[str, str]], None]) -> str:
        """See ``DatabaseDriver.identity_record``."""
        import psycopg

        d = self._database
        table = SQL(f'"{d.schema}".{STORE_TABLE}' if d.schema else STORE_TABLE)  # names, not input
        queries = {name: SQL(load_queries(self.name)[name]).format(table=table)
                   for name in ("select_identity", "insert_identity", "upsert_identity")}
        with psycopg.connect(d.conninfo()) as pg, pg.cursor() as cur:
            cur.execute(queries["select_identity"])
            rows: list[Any] = cur.fetchall()
            check(dict(rows))
            cur.executemany(queries["insert_identity"], list(defaults.items()))
            cur.executemany(queries["upsert_identity"], list(current.items()))
            cur.execute(queries["select_identity"])
            stored: list[Any] = cur.fetchall()
            return str(dict(stored)["store_id"])

    def journal_mode(self) -> str | None:
        """None: no file of its own (``DatabaseDriver.journal_mode``)."""
        return None

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """A connection of its own, in autocommit; an unreachable server is the store's one-line
        ``ConfigurationError`` (``Database.unreachable``: secrets masked)."""
        import psycopg

        d = self._database
        try:
            with psycopg.connect(d.conninfo(connect_timeout=5), autocommit=True) as conn:
                yield conn
        except psycopg.OperationalError as exc:
            raise d.unreachable(exc) from None

    def autovacuum(self) -> bool | None:
        """See ``DatabaseDriver.autovacuum``: ``select_autovacuum.sql`` on a connection of its own."""
        with self._connection() as conn:
            row = conn.execute(load_queries(self.name)["select_autovacuum"]).fetchone()
        return row is not None and row[0] == "on"

    def describe(self) -> str:
        """See ``DatabaseDriver.describe``."""
        d = self._database
        return f"PostgreSQL {d.host}:{d.port}/{d.dbname} schema {d.schema}"

    def schema_drop(self) -> None:
        """See ``DatabaseDriver.schema_drop``: ``drop_schema.sql`` on a connection of its own."""
        statement = SQL(load_queries(self.name)["drop_schema"]).format(
            schema=Identifier(self._database.schema or "public"))
        with self._connection() as conn:
            conn.execute(statement)

    def wakeups_start(self, wakeups: Mapping[str, Sequence[Callable[[str], None]]], stop: threading.Event) -> bool:
        """See ``DatabaseDriver.wakeups_start``: a ``Listener`` thread LISTENing on a connection
        of its own (``migrations.drivers.notify``)."""
        from migrations.drivers.notify import Listener

        Listener(self._database.conninfo(), wakeups).start(stop)
        return True

    def status_channel(self) -> str:
        """See ``DatabaseDriver.status_channel``: one per schema (channels are per database)."""
        from migrations.drivers.notify import status_channel

        return status_channel(self._database.schema)
