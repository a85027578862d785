"""``opledger migrate``: create every table once, before any worker starts (DESIGN §8).

Runs the ``eventsourcing`` library's table creation for the host application's recorders, then
applies this project's numbered read-model migrations with yoyo-migrations, then records the
store identity (store id, owner application, backend, codec and schema versions) that
``ledger.store_identity`` checks on every open. On SQLite the store's lock is taken first, before
anything reads the file.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yoyo import get_backend, read_migrations

from ledger import failpoints
from ledger.application import LedgerApplication
from ledger.codec import CODEC_VERSION
from ledger.config import Database
from ledger.errors import ConfigurationError
from ledger.persistence import StoreLock
from ledger.store_files import check_store_files, create_store_file
from ledger.store_identity import SCHEMA_VERSION, STORE_TABLE, check_newer_schema, read_store_identity

HERE = Path(__file__).parent


@dataclass(frozen=True)
class MigrationReport:
    """What ``migrate`` did.

    Attributes:
        applied: ids of read-model migrations applied in this run (empty when up to date).
        store_id: the store's identity (created on first migrate).
        app_name: the application that owns the store.
    """

    applied: list[str]
    store_id: str
    app_name: str


def _ensure_container(database: Database) -> None:
    if database.backend == "sqlite":
        assert database.path is not None
        # Under the lock, which checked the path and made the directory 0700: the file 0600
        # first (SQLite gives its WAL and index the same mode), then a damaged one is refused.
        create_store_file(database.path)
        check_store_files(database.path, thorough=True)
        try:
            conn = sqlite3.connect(database.path)
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            finally:
                conn.close()
        except (OSError, sqlite3.DatabaseError) as exc:
            raise ConfigurationError(f"{database.path} cannot be used as an SQLite store: {exc}") from None
        if str(mode).lower() != "wal":
            raise ConfigurationError(f"cannot put {database.path} in WAL mode (got {mode})")
    else:
        import psycopg

        try:
            with psycopg.connect(database.conninfo(connect_timeout=10), autocommit=True) as pg:
                if database.schema:
                    # The library names types and tables in this schema without quoting some of
                    # them, so a name PostgreSQL reserves breaks it halfway: refuse it up front.
                    found = pg.execute("SELECT catdesc FROM pg_get_keywords() WHERE word = %s AND catcode <> 'U'",
                                         (database.schema,)).fetchone()
                    if found:
                        raise ConfigurationError(f"schema name {database.schema!r} is a PostgreSQL keyword "
                                                 f"({found[0]}); choose another")
                    pg.execute(f'CREATE SCHEMA IF NOT EXISTS "{database.schema}"')
        except psycopg.OperationalError as exc:
            raise database.unreachable(exc) from None


def _create_library_tables(app_class: type, database: Database,
                           check: Callable[[Any], object] | None = None) -> None:
    # Constructing the application with CREATE_TABLE=y makes its recorders create their tables.
    app: Any = app_class(env=database.library_env(create_table=True))
    try:
        if check is not None:
            check(app)
    finally:
        app.close()


def _record_identity(database: Database, app_name: str) -> str:
    new_id = str(uuid.uuid4())
    if database.backend == "sqlite":
        assert database.path is not None  # parsed SQLite URLs always have a path
        conn = sqlite3.connect(database.path)
        try:
            with conn:
                rows = dict(conn.execute(f"SELECT key, value FROM {STORE_TABLE}").fetchall())
                _check_owner(rows, app_name)
                conn.execute(f"INSERT OR IGNORE INTO {STORE_TABLE} VALUES ('store_id', ?)", (new_id,))
                conn.execute(f"INSERT OR IGNORE INTO {STORE_TABLE} VALUES ('app_name', ?)", (app_name,))
                conn.execute(f"INSERT OR IGNORE INTO {STORE_TABLE} VALUES ('backend', 'sqlite')")
                conn.execute(f"INSERT OR IGNORE INTO {STORE_TABLE} VALUES ('codec_version', ?)", (str(CODEC_VERSION),))
                # The code's version, whatever the migration files wrote: migrate is the repair.
                conn.execute(f"INSERT OR REPLACE INTO {STORE_TABLE} VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
                return conn.execute(f"SELECT value FROM {STORE_TABLE} WHERE key='store_id'").fetchone()[0]
        finally:
            conn.close()
    import psycopg

    table = f'"{database.schema}".{STORE_TABLE}' if database.schema else STORE_TABLE
    with psycopg.connect(database.conninfo()) as pg:
        rows = dict(pg.execute(f"SELECT key, value FROM {table}").fetchall())
        _check_owner(rows, app_name)
        for key, value in (("store_id", new_id), ("app_name", app_name), ("backend", "postgres"),
                           ("codec_version", str(CODEC_VERSION))):
            pg.execute(f"INSERT INTO {table} VALUES (%s, %s) ON CONFLICT (key) DO NOTHING", (key, value))
        pg.execute(f"INSERT INTO {table} VALUES ('schema_version', %s) ON CONFLICT (key) DO UPDATE "
                     "SET value = EXCLUDED.value", (str(SCHEMA_VERSION),))
        stored = pg.execute(f"SELECT value FROM {table} WHERE key='store_id'").fetchone()
        assert stored is not None  # inserted just above, in this transaction
        return str(stored[0])


def _check_owner(rows: dict[str, str], app_name: str) -> None:
    owner = rows.get("app_name")
    if owner is not None and owner != app_name:
        raise ConfigurationError(f"the store belongs to application {owner!r}, not {app_name!r}")


def migrate(database: Database, app_class: type[LedgerApplication], *,
            check: Callable[[Any], object] | None = None) -> MigrationReport:
    """Create the library's tables and apply pending read-model migrations, once.

    Args:
        database: where the store lives.
        app_class: the host ``LedgerApplication`` subclass; its ``name`` names the tables on
            PostgreSQL and is recorded as the store's owner.
        check: called with the application once the library's tables exist, before any
            read-model migration; an error it raises stops the migration (``opledger
            migrate`` passes ``projections.history.check_readable_history``).

    Returns:
        A :class:`MigrationReport`.

    Raises:
        ConfigurationError: the database is unreachable, belongs to another application, or was
            migrated by a newer opledger (nothing is created then).
        StoreLockedError: another process owns the SQLite store.
        The errors of ``check``.
    """
    app_name = app_class.name
    lock = StoreLock(database.path) if database.backend == "sqlite" and database.path is not None else None
    if lock is not None:
        lock.acquire()
    try:
        _ensure_container(database)
        # Refuse before creating anything: another application's store, or a newer schema.
        existing = read_store_identity(database, missing_ok=True)
        _check_owner(existing, app_name)
        check_newer_schema(existing, database)
        _create_library_tables(app_class, database, check)
        failpoints.reached("migration")  # process tests: SIGKILL mid-migration (ledger.failpoints)
        backend = get_backend(database.url(driver="psycopg"))
        migrations = read_migrations(str(HERE / database.backend / "schema"))
        try:
            with backend.lock():
                pending = backend.to_apply(migrations)
                backend.apply_migrations(pending)
        finally:
            # yoyo keeps its connection open otherwise: an idle SQLite connection keeps the WAL
            # index alive, and the store's file could then never be switched safely (import-json).
            backend.connection.close()
        applied = [m.id for m in pending]
        failpoints.reached("migration")
        store_id = _record_identity(database, app_name)
        return MigrationReport(applied=applied, store_id=store_id, app_name=app_name)
    finally:
        if lock is not None:
            lock.release()
