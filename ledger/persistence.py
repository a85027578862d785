"""Opening the store: the SQLite factory that verifies durability, the single-writer lock, and the
store identity check. Source: DESIGN §8.

The ``eventsourcing`` library's recorders do all event storage. This module only adds what the
embedded default needs to be safe: ``synchronous=FULL`` and WAL verified on every connection, an
exclusive lock file (``0600``, taken before anything reads the store) so one process owns a SQLite
store for writing. The store identity check lives in ``ledger.store_identity``, the path,
permission and damage checks in ``ledger.store_files``.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore, PostgresFactory
from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool, SQLiteFactory
from eventsourcing.utils import retry
from psycopg.sql import SQL, Composed, Identifier, Literal

from ledger.config import CONNECTION_OPTIONS_ENV
from ledger.errors import ConfigurationError, StoreLockedError
from ledger.operation import Operation
from ledger.store_files import STORE_FILE_MODE, check_store_path, prepare_store_directory, tighten_modes
from ledger.store_identity import (  # re-exported: their home before issue 16
    SCHEMA_VERSION,
    STORE_TABLE,
    check_newer_schema,
    check_store_identity,
    read_store_identity,
)
from ledger.topics import topics_of

__all__ = [
    "SCHEMA_VERSION", "STORE_TABLE", "LedgerPostgresApplicationRecorder", "LedgerPostgresFactory",
    "LedgerSQLiteFactory", "StoreLock",
    "check_newer_schema", "check_store_identity", "read_store_identity",
]

SQLITE_SYNCHRONOUS_FULL = 2  # the value PRAGMA synchronous reads back for FULL
INTENT_PAYLOAD = "intent"
"""The event log's NOTIFY payload when the insert appended a new intent (``Operation.Intended``):
only then is there anything for a worker's read of the log's tail (``executors.tail``)."""
APPENDED_PAYLOAD = "appended"
"""The payload for any other insert (claims, outcomes, settlements, entities' own events). An
empty payload comes from an insert function created before the payload existed (migrate
re-creates it): it may have appended an intent."""
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
        raw.execute("PRAGMA synchronous=FULL")
        if raw.execute("PRAGMA synchronous").fetchone()[0] != SQLITE_SYNCHRONOUS_FULL:
            raise InterfaceError("SQLite refused synchronous=FULL; refusing to run without durable commits")
        if not self.is_sqlite_memory_mode:
            mode = raw.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                raise InterfaceError(f"SQLite journal mode is {mode}, expected wal")
        return connection


class LedgerSQLiteFactory(SQLiteFactory):
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


class LedgerPostgresFactory(PostgresFactory):
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
        self.sql_create_statements.append(SQL(
            "CREATE OR REPLACE FUNCTION {function}("
            "ids {id_type}[], versions bigint[], topics text[], states bytea[]) "
            "RETURNS SETOF bigint LANGUAGE plpgsql AS $BODY$ BEGIN "
            "SET LOCAL lock_timeout = '{lock_timeout}s'; "
            "LOCK TABLE {table} IN EXCLUSIVE MODE; "
            "PERFORM pg_notify({channel}, CASE WHEN topics && {intents} "
            "THEN '" + INTENT_PAYLOAD + "' ELSE '" + APPENDED_PAYLOAD + "' END); "
            "RETURN QUERY INSERT INTO {table} (originator_id, originator_version, topic, state) "
            "SELECT * FROM unnest(ids, versions, topics, states) RETURNING notification_id; "
            "END; $BODY$"
        ).format(function=function, table=table, id_type=Identifier(datastore.originator_id_type),
                 lock_timeout=datastore.lock_timeout, channel=Literal(self.channel_name),
                 intents=Literal(list(topics_of([Operation.Intended])))))
        self._call_insert = SQL("SELECT id FROM {function}(%b, %b, %b, %b) AS id").format(function=function)
        self._function = function
        self.insert_function = function
        """The insert function's qualified name (``projections.probe`` calls it too)."""
        self._id_type = datastore.originator_id_type
        self._small_calls: dict[int, SQL | Composed] = {}

    def _call_small(self, count: int) -> SQL | Composed:
        """The call for a batch of ``count`` events with one parameter per value: psycopg dumps
        scalars in C, lists in Python (``SMALL_BATCH`` has the figures); one prepared statement
        per batch size."""
        call = self._small_calls.get(count)
        if call is None:
            def column(cast: str) -> str:
                return f"ARRAY[{', '.join(['%s'] * count)}]::{cast}[]"

            call = self._small_calls[count] = SQL("SELECT id FROM {function}(" + ", ".join(
                column(c) for c in (self._id_type, "bigint", "text", "bytea")) + ") AS id").format(
                function=self._function)
        return call

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
        params: list[Any]
        if len(stored_events) <= SMALL_BATCH:
            call, params = self._call_small(len(stored_events)), [v for column in columns for v in column]
        else:
            call, params = self._call_insert, list(columns)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(call, params, prepare=True)
            return [row["id"] for row in curs.fetchall()]


class StoreLock:
    """An exclusive, non-blocking lock file beside a SQLite store (``<file>.lock``).

    One process owns an embedded store for writing (DESIGN §8). Within that process any number
    of holders share the lock (it is counted); another process cannot take it. The OS drops the
    lock when the process dies, SIGKILL included, so a crashed owner never leaves a stale lock.

    Raises:
        StoreLockedError: on ``acquire`` when another process holds the lock.
    """

    _held: dict[str, list[int]] = {}  # lock path -> [fd, holders] for this process
    # Re-entrant: taking the lock allocates, so the garbage collector may run inside ``acquire``
    # and an unreachable application's ``__del__`` (``Application.close``) call ``release`` on
    # this thread; with a plain Lock that deadlocked the process (seen in the test suite).
    _guard = threading.RLock()

    def __init__(self, db_path: Path) -> None:
        self.store = Path(db_path)
        self.path = Path(str(db_path) + ".lock")
        self._holding = False

    def acquire(self) -> StoreLock:
        """Take the lock (or share this process's), writing the owner's pid into the file."""
        key = str(self.path.resolve())
        with self._guard:
            if self._holding:
                return self
            held = self._held.get(key)
            if held is None:
                held = self._held[key] = [self._lock_file(), 0]
            held[1] += 1
            self._holding = True
        return self

    def _lock_file(self) -> int:
        # Only lstat/stat before the lock: nothing reads the store until this process owns it.
        if self.store.is_dir() and not self.store.is_symlink():  # refuse before leaving a lock file beside it
            raise ConfigurationError(f"{self.store} is a directory, not an SQLite store file")
        check_store_path(self.store)
        prepare_store_directory(self.store)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, STORE_FILE_MODE)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create the store's lock file {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                holder = self.path.read_text().strip() or "?"
            except OSError:
                holder = "?"
            raise StoreLockedError(
                f"the store {self.store} is owned by another process (pid {holder}); "
                "stop it first (reading commands such as `opledger ops list` work meanwhile)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        tighten_modes(self.store)  # the lock file and store files of older versions were 0644
        return fd

    def release(self) -> None:
        """Release this holder's share (idempotent); the file lock goes with the last one."""
        key = str(self.path.resolve())
        with self._guard:
            if not self._holding:
                return
            self._holding = False
            held = self._held[key]
            held[1] -= 1
            if held[1] == 0:
                del self._held[key]
                fcntl.flock(held[0], fcntl.LOCK_UN)
                os.close(held[0])

    def __enter__(self) -> StoreLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
