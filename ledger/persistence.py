"""Opening the store: the SQLite factory that verifies durability, the single-writer lock, and the
store identity check. Source: DESIGN §8.

The ``eventsourcing`` library's recorders do all event storage. This module only adds what the
embedded default needs to be safe: ``synchronous=FULL`` and WAL verified on every connection, an
exclusive lock file so one process owns a SQLite store for writing, and a refusal to open a store
whose recorded schema version or owner application differs from what the code expects.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool, SQLiteFactory
from eventsourcing.utils import retry
from psycopg.sql import SQL, Identifier

from ledger.config import Database
from ledger.errors import ConfigurationError, StoreLockedError

SCHEMA_VERSION = 5
"""The read-model schema version this code expects; ``opledger migrate`` records it."""

STORE_TABLE = "opledger_store"
SQLITE_SYNCHRONOUS_FULL = 2  # the value PRAGMA synchronous reads back for FULL


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


class LedgerPostgresApplicationRecorder(PostgresApplicationRecorder):
    """The library's PostgreSQL application recorder, inserting a batch in one round trip.

    The library inserts in a client-side transaction: ``BEGIN``, the ``EXCLUSIVE`` table lock,
    ``NOTIFY``, the insert (one array of a composite type, which psycopg dumps as text, in
    Python), a sync to fetch the notification ids, then ``COMMIT``: several round trips, all
    while holding the lock that serializes every writer of the store. This recorder calls one
    server-side function instead, in autocommit: the same lock, notify and insert (plain arrays,
    dumped by psycopg's binary C dumpers), the ids returned in insertion order, and the commit,
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
            "NOTIFY {channel}; "
            "RETURN QUERY INSERT INTO {table} (originator_id, originator_version, topic, state) "
            "SELECT * FROM unnest(ids, versions, topics, states) RETURNING notification_id; "
            "END; $BODY$"
        ).format(function=function, table=table, id_type=Identifier(datastore.originator_id_type),
                 lock_timeout=datastore.lock_timeout, channel=Identifier(self.channel_name)))
        self._call_insert = SQL("SELECT id FROM {function}(%s, %s, %s, %s) AS id").format(function=function)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        """Insert ``stored_events`` in one transaction; return their notification ids, in order.

        Raises:
            eventsourcing.persistence.IntegrityError: an ``(originator_id, originator_version)``
                is already recorded; nothing of the batch is written.
        """
        if not stored_events:
            return []
        params = ([e.originator_id for e in stored_events], [e.originator_version for e in stored_events],
                  [e.topic for e in stored_events], [e.state for e in stored_events])
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._call_insert, params, prepare=True)
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
    _guard = threading.Lock()

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
        if self.store.is_dir():  # refuse before leaving a lock file beside it
            raise ConfigurationError(f"{self.store} is a directory, not an SQLite store file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
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


def read_store_identity(database: Database, *, missing_ok: bool = False) -> dict[str, str]:
    """Return the ``opledger_store`` key/value rows (``schema_version``, ``store_id``, ``app_name``).

    Args:
        database: the store.
        missing_ok: return ``{}`` for a store never migrated instead of raising.

    Raises:
        ConfigurationError: the store has not been migrated (no identity table or no file),
            unless ``missing_ok``; or it cannot be read.
    """
    hint = "run `opledger migrate` first"
    if database.backend == "sqlite":
        assert database.path is not None
        if not database.path.exists():
            if missing_ok:
                return {}
            raise ConfigurationError(f"no store at {database.path}; {hint}")
        if database.path.is_dir():
            raise ConfigurationError(f"{database.path} is a directory, not an SQLite store file")
        try:
            conn = sqlite3.connect(f"file:{database.path}?mode=ro", uri=True)
            try:
                rows = conn.execute(f"SELECT key, value FROM {STORE_TABLE}").fetchall()
            finally:
                conn.close()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                if missing_ok:
                    return {}
                raise ConfigurationError(f"the store at {database.path} is not migrated; {hint}") from None
            raise ConfigurationError(f"{database.path} cannot be opened as a store: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise ConfigurationError(f"{database.path} is not an opledger store: {exc}") from None
    else:
        import psycopg

        table = f'"{database.schema}".{STORE_TABLE}' if database.schema else STORE_TABLE
        try:
            with psycopg.connect(database.conninfo(), connect_timeout=10) as pg:
                rows = pg.execute(f"SELECT key, value FROM {table}").fetchall()
        except psycopg.errors.UndefinedTable:
            if missing_ok:
                return {}
            raise ConfigurationError(f"the PostgreSQL store is not migrated; {hint}") from None
        except psycopg.OperationalError as exc:
            raise ConfigurationError(f"cannot reach PostgreSQL at {database.host}:{database.port}: {exc}") from None
    return {str(k): str(v) for k, v in rows}


def check_newer_schema(identity: dict[str, str]) -> None:
    """Refuse a store migrated by a newer opledger (schema version above ``SCHEMA_VERSION``).

    Args:
        identity: the store's identity rows (``read_store_identity``).

    Raises:
        ConfigurationError: the store's schema version is newer than this code's.
    """
    version = identity.get("schema_version", "")
    if version.isdigit() and int(version) > SCHEMA_VERSION:
        raise ConfigurationError(
            f"the store has schema version {version}, newer than this code's {SCHEMA_VERSION}; upgrade opledger")


def check_store_identity(database: Database, app_name: str) -> dict[str, str]:
    """Refuse a mismatched reopen: the store must be migrated to ``SCHEMA_VERSION`` and owned by
    the application named ``app_name``.

    Returns:
        The identity rows.

    Raises:
        ConfigurationError: not migrated, another schema version, or another application's store.
    """
    identity = read_store_identity(database)
    check_newer_schema(identity)
    version = identity.get("schema_version")
    if version != str(SCHEMA_VERSION):
        raise ConfigurationError(
            f"the store has schema version {version}, this code expects {SCHEMA_VERSION}; run `opledger migrate`"
        )
    owner = identity.get("app_name")
    if owner != app_name:
        raise ConfigurationError(
            f"the store belongs to application {owner!r}, not {app_name!r}; check OPLEDGER_APP and the database URL"
        )
    return identity
