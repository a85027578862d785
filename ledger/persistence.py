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
from pathlib import Path
from typing import Any

from eventsourcing.persistence import InterfaceError
from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool, SQLiteFactory

from ledger.config import Database
from ledger.errors import ConfigurationError, StoreLockedError

SCHEMA_VERSION = 2
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
    """The library's SQLite factory with durability verified (selected by ``ledger.config``)."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        old = self.datastore.pool
        self.datastore.pool = _DurableSQLitePool(db_name=old.db_name, lock_timeout=old.lock_timeout)
        old.close()


class StoreLock:
    """An exclusive, non-blocking lock file beside a SQLite store (``<file>.lock``).

    One process owns an embedded store for writing (DESIGN §8). The OS drops the lock when the
    process dies, SIGKILL included, so a crashed owner never leaves a stale lock.

    Raises:
        StoreLockedError: on ``acquire`` when another process holds the lock.
    """

    def __init__(self, db_path: Path) -> None:
        self.path = Path(str(db_path) + ".lock")
        self._fd: int | None = None

    def acquire(self) -> StoreLock:
        """Take the lock, writing this process id into the file for operators."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                holder = self.path.read_text().strip() or "?"
            except OSError:
                holder = "?"
            raise StoreLockedError(
                f"the store {self.path.with_suffix('')} is owned by another process (pid {holder}); "
                "stop it, or open the store read-only"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StoreLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_store_identity(database: Database) -> dict[str, str]:
    """Return the ``opledger_store`` key/value rows (``schema_version``, ``store_id``, ``app_name``).

    Raises:
        ConfigurationError: the store has not been migrated (no identity table or no file).
    """
    hint = "run `opledger migrate` first"
    if database.backend == "sqlite":
        assert database.path is not None
        if not database.path.exists():
            raise ConfigurationError(f"no store at {database.path}; {hint}")
        conn = sqlite3.connect(f"file:{database.path}?mode=ro", uri=True)
        try:
            rows = conn.execute(f"SELECT key, value FROM {STORE_TABLE}").fetchall()
        except sqlite3.OperationalError:
            raise ConfigurationError(f"the store at {database.path} is not migrated; {hint}") from None
        finally:
            conn.close()
    else:
        import psycopg

        table = f"{database.schema}.{STORE_TABLE}" if database.schema else STORE_TABLE
        try:
            with psycopg.connect(database.conninfo(), connect_timeout=10) as conn:
                rows = conn.execute(f"SELECT key, value FROM {table}").fetchall()
        except psycopg.errors.UndefinedTable:
            raise ConfigurationError(f"the PostgreSQL store is not migrated; {hint}") from None
        except psycopg.OperationalError as exc:
            raise ConfigurationError(f"cannot reach PostgreSQL at {database.host}:{database.port}: {exc}") from None
    return {str(k): str(v) for k, v in rows}


def check_store_identity(database: Database, app_name: str) -> dict[str, str]:
    """Refuse a mismatched reopen: the store must be migrated to ``SCHEMA_VERSION`` and owned by
    the application named ``app_name``.

    Returns:
        The identity rows.

    Raises:
        ConfigurationError: not migrated, another schema version, or another application's store.
    """
    identity = read_store_identity(database)
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
