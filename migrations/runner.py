"""``opledger migrate``: create every table once, before any worker starts (DESIGN §8).

Runs the ``eventsourcing`` library's table creation for the host application's recorders, then
applies this project's numbered read-model migrations with yoyo-migrations, then records the
store identity (store id, owner application, backend, codec and schema versions) that
``ledger.store_identity`` checks on every open. On SQLite the store's lock is taken first, before
anything reads the file.
"""

from __future__ import annotations

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
from ledger.store_identity import SCHEMA_VERSION, check_newer_schema, read_store_identity
from migrations.drivers import DatabaseDriver, database_driver

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


def _create_library_tables(app_class: type, database: Database,
                           check: Callable[[Any], object] | None = None) -> None:
    # Constructing the application with CREATE_TABLE=y makes its recorders create their tables.
    app: Any = app_class(env=database.library_env(create_table=True))
    try:
        if check is not None:
            check(app)
    finally:
        app.close()


def _record_identity(driver: DatabaseDriver, app_name: str) -> str:
    # The code's schema version, whatever the migration files wrote: migrate is the repair.
    return driver.identity_record(
        defaults={"store_id": str(uuid.uuid4()), "app_name": app_name, "backend": driver.name,
                  "codec_version": str(CODEC_VERSION)},
        current={"schema_version": str(SCHEMA_VERSION)}, check=lambda rows: _check_owner(rows, app_name))


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
    driver = database_driver(database)
    lock = StoreLock(driver.store_file) if driver.store_file is not None else None
    if lock is not None:
        lock.acquire()
    try:
        driver.store_prepare()
        # Refuse before creating anything: another application's store, or a newer schema.
        existing = read_store_identity(database, missing_ok=True)
        _check_owner(existing, app_name)
        check_newer_schema(existing, database)
        _create_library_tables(app_class, database, check)
        failpoints.reached("migration")  # process tests: SIGKILL mid-migration (ledger.failpoints)
        backend = get_backend(database.url(driver="psycopg"))
        migrations = read_migrations(str(driver.schema_files))
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
        store_id = _record_identity(driver, app_name)
        return MigrationReport(applied=applied, store_id=store_id, app_name=app_name)
    finally:
        if lock is not None:
            lock.release()
