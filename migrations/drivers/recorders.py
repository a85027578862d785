"""The library's factories and application recorder, adapted for opledger's store (ADR 0008):
durability verified on every SQLite connection, the owner's lock taken by the SQLite factory, a
URL's libpq parameters given to the PostgreSQL pool, PostgreSQL's inserts made by one
server-side function, and removed records hidden from the in-memory recorder's log. ``ledger.config``
(and ``migrations.drivers.memory_env``) name them in the library's environment
(``PERSISTENCE_MODULE``, ``APPLICATION_RECORDER_TOPIC``). Every factory answers whether an id is
archived. Source: DESIGN §8.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import ApplicationRecorder, InterfaceError, Notification, OperationalError, StoredEvent
from eventsourcing.popo import POPOApplicationRecorder, POPOFactory
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore, PostgresFactory
from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool, SQLiteFactory
from eventsourcing.utils import retry
from psycopg.sql import SQL, Composed, Identifier, Literal

from ledger.config import CONNECTION_OPTIONS_ENV
from ledger.errors import ConfigurationError
from ledger.operation import Operation
from ledger.persistence import APPENDED_PAYLOAD, INTENT_PAYLOAD, StoreLock
from ledger.topics import topics_of
from migrations.drivers.memory import REMOVED_TOPIC
from migrations.drivers.queries import load_queries

SQLITE = load_queries("sqlite")
POSTGRES = load_queries("postgres")
_SMALL_COLUMN = "".join(line for line in POSTGRES["insert_small_column"].splitlines(keepends=True)
                        if not line.startswith("--")).strip()  # a fragment: no comment inside a call

SQLITE_SYNCHRONOUS_FULL = 2  # the value PRAGMA synchronous reads back for FULL
SMALL_BATCH = 12
"""Batches of at most this many events are inserted with one parameter per value (a statement
per size, each prepared once per connection); larger ones pass four arrays in binary. Client CPU
per call, measured (docs/performance.md): 2-6 events 100 against 130-210 µs for arrays; 16
events 330 against 150; 65 events 1,010 against 330, and 1,400 for arrays dumped as text."""


class _DurableSQLitePool(SQLiteConnectionPool):
    """The library's pool, with ``synchronous=FULL`` set and read back on every new connection."""

    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        raw = connection._sqlite_conn  # the library exposes no hook for per-connection pragmas
        raw.execute(SQLITE["set_synchronous_full"])
        if raw.execute(SQLITE["select_synchronous"]).fetchone()[0] != SQLITE_SYNCHRONOUS_FULL:
            raise InterfaceError("SQLite refused synchronous=FULL; refusing to run without durable commits")
        if not self.is_sqlite_memory_mode:
            mode = raw.execute(SQLITE["select_journal_mode"]).fetchone()[0]
            if str(mode).lower() != "wal":
                raise InterfaceError(f"SQLite journal mode is {mode}, expected wal")
        return connection


class _ArchiveIndex:
    """What both factories answer for ``LedgerApplication.intend``: whether an id is archived."""

    def archived_segment(self, recorder: Any, operation_id: UUID) -> int | None:
        """The segment an archived operation is in, or None (``Archives.archive_lookup``).

        Args:
            recorder: the application's recorder (its store's driver is chosen from it).
            operation_id: the id about to be intended.
        """
        from migrations.drivers import archives_of_recorder

        found = archives_of_recorder(recorder).archive_lookup([operation_id]).get(operation_id)
        return found[0] if found else None


class LedgerSQLiteFactory(_ArchiveIndex, SQLiteFactory):
    """The library's SQLite factory with durability verified (selected by ``ledger.config``).

    A writable store is opened only by the process that owns it: the factory takes the store's
    lock (shared by every application in that process) and releases it on ``close``.

    Raises:
        StoreLockedError: another process owns the store.
    """

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        old = self.datastore.pool
        self.lock: StoreLock | None = None
        name = old.db_name
        if not old.is_sqlite_memory_mode and "mode=ro" not in name:
            self.lock = StoreLock(Path(name.removeprefix("file:").split("?", 1)[0])).acquire()
        self.datastore.pool = _DurableSQLitePool(db_name=name, lock_timeout=old.lock_timeout)
        old.close()

    def close(self) -> None:
        super().close()
        if self.lock is not None:
            self.lock.release()


class LedgerPOPOApplicationRecorder(POPOApplicationRecorder):
    """The library's in-memory application recorder, whose log leaves out the records an archive
    run removed (``migrations.drivers.memory``: each leaves a placeholder at its position, as a
    deleted row leaves a gap in the SQL logs). Until a record is removed it reads as the library's."""

    def select_notifications(self, start: int | None, limit: int, stop: int | None = None,
                             topics: Sequence[str] = (), *, inclusive_of_start: bool = True) -> Sequence[Notification]:
        """The library's ``select_notifications`` without removed records: up to ``limit`` of the
        others, read on past the places removed ones took."""
        page = super().select_notifications(start, limit, stop, topics, inclusive_of_start=inclusive_of_start)
        if topics and REMOVED_TOPIC not in topics:
            return page  # the library's topic filter left them out
        kept = [n for n in page if n.topic != REMOVED_TOPIC]
        asked = limit
        while len(page) == asked and len(kept) < limit:  # a full page, short of removed ones: read on
            asked = limit - len(kept)
            page = super().select_notifications(page[-1].id, asked, stop, topics, inclusive_of_start=False)
            kept.extend(n for n in page if n.topic != REMOVED_TOPIC)
        return kept


class LedgerPOPOFactory(_ArchiveIndex, POPOFactory):
    """The library's in-memory factory, with :class:`LedgerPOPOApplicationRecorder` (selected by
    ``migrations.drivers.memory_env``): a store for tests, the simulator and dry runs."""

    def application_recorder(self) -> ApplicationRecorder:
        """A new :class:`LedgerPOPOApplicationRecorder`."""
        return LedgerPOPOApplicationRecorder()


class LedgerPostgresFactory(_ArchiveIndex, PostgresFactory):
    """The library's PostgreSQL factory, its pool given the database URL's libpq parameters
    (selected by ``ledger.config``).

    The library builds its pool from ``POSTGRES_HOST``, ``_PORT``, ``_DBNAME``, ``_USER`` and
    ``_PASSWORD`` only; ``sslmode``, ``sslrootcert``, ``application_name`` and the rest of a URL's
    connection options (``ledger.connection_options``) reach it here, as keyword arguments of
    every connection its pool opens, the same ones every other connection of the process gets
    (``Database.conninfo``). The pool is not open yet when they are added.

    Args:
        env: the library's environment; ``CONNECTION_OPTIONS_ENV`` holds the options as JSON.

    Source: issue 34 item 1.
    """

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        options = self.env.get(CONNECTION_OPTIONS_ENV)
        if options:
            kwargs = self.datastore.pool.kwargs
            assert isinstance(kwargs, dict)  # the library always passes a dict (host, port, ...)
            kwargs.update(json.loads(options))


class LedgerPostgresApplicationRecorder(PostgresApplicationRecorder):
    """The library's PostgreSQL application recorder, inserting a batch in one round trip.

    The library inserts in a client-side transaction: ``BEGIN``, the ``EXCLUSIVE`` table lock,
    ``NOTIFY``, the insert (one array of a composite type, which psycopg dumps as text, in
    Python), a sync to fetch the notification ids, then ``COMMIT``: several round trips, all
    while holding the lock that serializes every writer of the store. This recorder calls one
    server-side function instead, in autocommit: the same lock, notify (its payload says whether
    an intent was appended: ``INTENT_PAYLOAD``) and insert (one value per parameter, or plain
    arrays dumped in binary: ``SMALL_BATCH``), the ids returned in insertion order, and the commit,
    in one statement. Notification ids stay in commit order (the lock is taken before any id is
    drawn and held until the commit), so followers never pass over a gap that fills later.

    ``opledger migrate`` creates the function with the table (``create_table``). Selected by
    ``ledger.config`` (``APPLICATION_RECORDER_TOPIC``); docs/performance.md has the figures.

    Args:
        datastore: the library's PostgreSQL datastore.
        events_table_name: the application's events table.

    Raises:
        ConfigurationError: the datastore stores ids as text (``ORIGINATOR_ID_TYPE=text``).
    """

    def __init__(self, datastore: PostgresDatastore, events_table_name: str = "stored_events") -> None:
        if datastore.originator_id_type != "uuid":
            # Operation ids are UUIDs (``ledger.identity.operation_id``), and the ledger's reads
            # compare ids as uuid: a text id column would fail at the first save or read.
            raise ConfigurationError(
                f"ORIGINATOR_ID_TYPE={datastore.originator_id_type} is not supported: opledger stores "
                "aggregate ids as uuid on PostgreSQL; unset ORIGINATOR_ID_TYPE (or set it to uuid)")
        super().__init__(datastore, events_table_name=events_table_name)
        function = Identifier(datastore.schema, f"opledger_insert_{events_table_name}"[:63])
        table = Identifier(datastore.schema, events_table_name)
        self.sql_create_statements.append(SQL(POSTGRES["create_insert_function"]).format(
            function=function, table=table, id_type=Identifier(datastore.originator_id_type),
            lock_timeout=datastore.lock_timeout, channel=Literal(self.channel_name),
            intents=Literal(list(topics_of([Operation.Intended]))), intent_payload=Literal(INTENT_PAYLOAD),
            appended_payload=Literal(APPENDED_PAYLOAD)))
        self._call_insert = SQL(POSTGRES["call_insert"]).format(function=function)
        self._function = function
        self.insert_function = function
        """The insert function's qualified name (``projections.probe`` calls it too)."""
        self._id_type = datastore.originator_id_type
        # Each call rendered to bytes once: psycopg walks a composed statement and escapes its
        # identifiers through libpq at every execute, about 8 % of a producer's intend + save.
        self._rendered: dict[int, bytes] = {}

    def _call(self, count: int, conn: Any) -> bytes:
        """The call for a batch of ``count`` events, rendered on ``conn``. Up to ``SMALL_BATCH``
        events, one parameter per value: psycopg dumps scalars in C, lists in Python
        (``SMALL_BATCH`` has the figures); one prepared statement per batch size. Larger batches
        pass four arrays (``count`` 0 stands for them all)."""
        rendered = self._rendered.get(count)
        if rendered is None:
            call: SQL | Composed = self._call_insert
            if count:
                placeholders = ", ".join(["%s"] * count)
                arguments = SQL(", ").join(
                    SQL(_SMALL_COLUMN).format(placeholders=SQL(placeholders), cast=SQL(cast))
                    for cast in (self._id_type, "bigint", "text", "bytea"))
                call = SQL(POSTGRES["call_insert_small"]).format(function=self._function, arguments=arguments)
            rendered = self._rendered[count] = call.as_bytes(conn)
        return rendered

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        """Insert ``stored_events`` in one transaction; return their notification ids, in order.

        Raises:
            eventsourcing.persistence.IntegrityError: an ``(originator_id, originator_version)``
                is already recorded; nothing of the batch is written.
        """
        if not stored_events:
            return []
        columns = ([e.originator_id for e in stored_events], [e.originator_version for e in stored_events],
                   [e.topic for e in stored_events], [e.state for e in stored_events])
        small = len(stored_events) <= SMALL_BATCH
        params: list[Any] = [v for column in columns for v in column] if small else list(columns)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._call(len(stored_events) if small else 0, conn), params, prepare=True)
            return [row["id"] for row in curs.fetchall()]


