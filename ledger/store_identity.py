"""The store's identity: written once by ``opledger migrate``, compared on every open.

The ``opledger_store`` table holds ``store_id`` (a random UUID, written once), ``app_name`` (the
owner application, written once), ``backend``, ``codec_version`` (``ledger.codec.CODEC_VERSION``,
written once) and ``schema_version`` (the read models' version, rewritten by each migrate). Every
open compares all of it with what this process expects and refuses a mismatch with a
``StoreIdentityError`` naming each difference and what to do. ``OPLEDGER_STORE_ID`` pins the
store id, so a process pointed at another store (a copy restored from another environment, a
mistyped URL) refuses it rather than working on it.

On SQLite the identity is read on a read-only connection; an owner reads it only after taking
the store's lock (``adapters.runtime.open_store``, ``LedgerApplication``).

Source: DESIGN §8; issue 16 item 2.
"""

from __future__ import annotations

import sqlite3

from ledger.codec import CODEC_VERSION
from ledger.config import Database
from ledger.errors import ConfigurationError, StoreIdentityError
from ledger.store_files import check_store_path, damaged, is_damage, read_only_rows

SCHEMA_VERSION = 11
"""The read-model schema version this code expects; ``opledger migrate`` records it."""
STORE_TABLE = "opledger_store"
LEGACY_CODEC_VERSION = "1"
"""The codec version of a store migrated before the codec version was recorded (only 1 existed)."""


def read_store_identity(database: Database, *, missing_ok: bool = False) -> dict[str, str]:
    """Return the ``opledger_store`` key/value rows.

    Args:
        database: the store.
        missing_ok: return ``{}`` for a store never migrated instead of raising.

    Raises:
        ConfigurationError: the store has not been migrated (no identity table or no file),
            unless ``missing_ok``; or it cannot be reached.
        StorePathError: an unsafe SQLite path (``ledger.store_files``).
        StoreDamagedError: the SQLite file is damaged.
    """
    hint = "run `opledger migrate` first"
    if database.backend == "sqlite":
        assert database.path is not None
        check_store_path(database.path)
        if not database.path.exists() or database.path.stat().st_size == 0:
            if missing_ok:
                return {}
            raise ConfigurationError(f"no store at {database.path}; {hint}")
        try:
            rows = read_only_rows(database.path, f"SELECT key, value FROM {STORE_TABLE}")
        except sqlite3.DatabaseError as exc:
            if is_damage(exc):
                raise damaged(database.path, str(exc)) from None
            if "no such table" in str(exc):
                if missing_ok:
                    return {}
                raise ConfigurationError(f"the store at {database.path} is not migrated; {hint}") from None
            raise ConfigurationError(f"{database.path} cannot be opened as a store: {exc}") from None
    else:
        import psycopg

        table = f'"{database.schema}".{STORE_TABLE}' if database.schema else STORE_TABLE
        try:
            with psycopg.connect(database.conninfo(connect_timeout=10)) as pg:
                rows = pg.execute(f"SELECT key, value FROM {table}").fetchall()
        except psycopg.errors.UndefinedTable:
            if missing_ok:
                return {}
            raise ConfigurationError(f"the PostgreSQL store is not migrated; {hint}") from None
        except psycopg.OperationalError as exc:
            raise database.unreachable(exc) from None
    return {str(k): str(v) for k, v in rows}


def _where(database: Database) -> str:
    if database.backend == "sqlite":
        return str(database.path)
    return f"postgresql://{database.host}:{database.port}/{database.dbname}" + (
        f"?schema={database.schema}" if database.schema else "")


def check_newer_schema(identity: dict[str, str], database: Database | None = None) -> None:
    """Refuse a store written by a newer opledger: a schema version above ``SCHEMA_VERSION`` or
    another ledger codec version (``migrate`` calls it before creating anything).

    Args:
        identity: the store's identity rows (``read_store_identity``).
        database: the store, named in the error.

    Raises:
        StoreIdentityError: the store's schema or codec is not this code's.
    """
    where = _where(database) if database is not None else "store"
    version = identity.get("schema_version", "")
    if version.isdigit() and int(version) > SCHEMA_VERSION:
        raise StoreIdentityError(where, {"schema_version": (version, str(SCHEMA_VERSION))}, [
            f"the store has schema version {version}, newer than this code's {SCHEMA_VERSION}; upgrade opledger"])
    codec = identity.get("codec_version")
    if codec is not None and codec != str(CODEC_VERSION):
        raise StoreIdentityError(where, {"codec_version": (codec, str(CODEC_VERSION))}, [
            f"the store's ledger codec is version {codec}, this code's is {CODEC_VERSION}; run the opledger "
            "version that wrote it (records of another codec cannot be read or written here)"])


def check_store_identity(database: Database, app_name: str, *, store_id: str | None = None) -> dict[str, str]:
    """Refuse a mismatched reopen: compare every identity key with what this process expects.

    Args:
        database: the store.
        app_name: the application that must own it (``OPLEDGER_APP``'s ``name``).
        store_id: the pinned store id (``OPLEDGER_STORE_ID``); None accepts any.

    Returns:
        The identity rows.

    Raises:
        ConfigurationError: not migrated (no identity at all).
        StoreIdentityError: any key differs; the message lists each, with the fix.
        StorePathError, StoreDamagedError: see ``read_store_identity``.
    """
    identity = read_store_identity(database)
    check_newer_schema(identity, database)
    differences: dict[str, tuple[str | None, str]] = {}
    reasons: list[str] = []
    owner = identity.get("app_name")
    if owner != app_name:
        differences["app_name"] = (owner, app_name)
        reasons.append(f"the store belongs to application {owner!r}, not {app_name!r}; check OPLEDGER_APP "
                       "and the database URL")
    stored_backend = identity.get("backend")
    if stored_backend is not None and stored_backend != database.backend:
        differences["backend"] = (stored_backend, database.backend)
        reasons.append(f"it was created on {stored_backend}, opened as {database.backend}; it was copied "
                       "between backends by hand, which opledger does not support")
    if store_id is not None and identity.get("store_id") != store_id:
        differences["store_id"] = (identity.get("store_id"), store_id)
        reasons.append(f"its store id is {identity.get('store_id')}, OPLEDGER_STORE_ID pins {store_id}; point "
                       "the database URL at the pinned store, or change OPLEDGER_STORE_ID if this store "
                       "replaced it on purpose")
    version = identity.get("schema_version")
    if version != str(SCHEMA_VERSION):
        differences["schema_version"] = (version, str(SCHEMA_VERSION))
        reasons.append(f"the store has schema version {version}, this code expects {SCHEMA_VERSION}; "
                       "run `opledger migrate`")
    if differences:
        raise StoreIdentityError(_where(database), differences, reasons)
    return identity
