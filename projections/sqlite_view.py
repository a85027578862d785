"""The status view on the embedded SQLite store (its own connection to the same file)."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ledger.config import SQLITE_LOCK_TIMEOUT_SECONDS, Database
from migrations.drivers import database_driver
from projections.rows import COLUMNS, StatusRow
from projections.sql_view import SqlStatusView
from projections.view import MAIN_TABLE, REBUILD_TABLE

_TIME_FIELDS = ("lease_expires_at", "next_due_at", "created_at", "updated_at")
_UUID_INDEXES = tuple(COLUMNS.index(name) for name in ("operation_id", "source_entity_id"))
_TIME_INDEXES = tuple(COLUMNS.index(name) for name in _TIME_FIELDS)
_CANCEL_INDEX = COLUMNS.index("cancel_requested")
_ON_MAIN = re.compile(rf'\bON\s+"?{MAIN_TABLE}"?(?=[\s(])', re.IGNORECASE)  # an index's table


def _encode_time(value: datetime | None) -> str | None:
    # Fixed width (always microseconds, always +00:00), so text order is time order.
    if value is None:
        return None
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    # Naming ``timespec`` costs twice a plain ``isoformat()``, which differs only by leaving
    # out a zero microsecond part (timeit: 0.8 against 1.7 µs; three times per row written).
    return value.isoformat() if value.microsecond else value.isoformat(timespec="microseconds")


def _to_db(row: StatusRow) -> list[Any]:
    """The row's values in column order, as SQLite stores them (text UUIDs and times)."""
    values: list[Any] = list(row)
    for index in _UUID_INDEXES:
        values[index] = str(values[index])
    for index in _TIME_INDEXES:
        values[index] = _encode_time(values[index])
    values[_CANCEL_INDEX] = int(values[_CANCEL_INDEX])
    return values


class SQLiteStatusView(SqlStatusView):
    """``StatusView`` on SQLite. Thread-safe: one connection, serialized by a lock."""

    in_process = True

    def __init__(self, database: Database, *, read_only: bool = False) -> None:
        super().__init__(database_driver(database).queries)
        assert database.path is not None
        uri = f"file:{database.path}" + ("?mode=ro" if read_only else "")
        self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None,
                                     timeout=SQLITE_LOCK_TIMEOUT_SECONDS)
        if not read_only:
            # This connection writes only the read model, whose rows commit atomically with
            # their tracking position and are rebuilt from the log: a power loss may roll back
            # its last commits (rows and position together), never tear them. So no fsync per
            # commit (WAL with NORMAL); the event log's connections keep synchronous=FULL.
            self._conn.execute(self.queries["set_synchronous_normal"])
        self._read_only = read_only
        self._lock = threading.Lock()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        with self._lock:
            cur = self._conn.cursor()
            # BEGIN IMMEDIATE takes the write lock up front, so two writers never deadlock.
            cur.execute(self.queries["begin_read" if self._read_only else "begin_write"])
            try:
                yield cur
            except BaseException:
                self._conn.rollback()
                raise
            else:
                self._conn.commit()
            finally:
                cur.close()

    def _upsert(self, cur: Any, table: str, rows: list[StatusRow]) -> None:
        cur.executemany(self.queries["upsert_status"].replace("{table}", table), map(_to_db, rows))

    def _from_db(self, values: Sequence[Any]) -> StatusRow:
        data = dict(zip(COLUMNS, values))
        data["operation_id"] = UUID(data["operation_id"])
        data["source_entity_id"] = UUID(data["source_entity_id"])
        data["cancel_requested"] = bool(data["cancel_requested"])
        for name in _TIME_FIELDS:
            if data[name] is not None:
                data[name] = datetime.fromisoformat(data[name])
        return StatusRow(**data)

    def _time(self, value: datetime) -> Any:
        return _encode_time(value)

    def _id(self, value: UUID) -> Any:
        return str(value)

    def _ids(self, values: Collection[UUID]) -> Any:
        return json.dumps([str(value) for value in values])  # select_by_ids.sql reads it with json_each

    def _uuid(self, value: Any) -> UUID:
        return UUID(value)

    def _create_rebuild_table(self, cur: Any) -> None:
        # SQLite has no CREATE TABLE ... LIKE: reuse the migrated DDL with the new name.
        cur.execute(self.queries["select_table_ddl"], (MAIN_TABLE,))
        for kind, sql in cur.fetchall():
            if kind == "index":
                # Index names alternate between the two prefixes at each rebuild, since the old
                # table's indexes keep their names until it is dropped.
                found = re.search(r"INDEX (?:IF NOT EXISTS )?(\w+)", sql)
                assert found is not None, f"an index DDL names its index: {sql}"
                name = found.group(1)
                other = (name.replace(REBUILD_TABLE, MAIN_TABLE) if name.startswith(REBUILD_TABLE)
                         else name.replace(MAIN_TABLE, REBUILD_TABLE, 1))
                # After a swap SQLite keeps the renamed table's name quoted in the index's SQL.
                sql = _ON_MAIN.sub(f"ON {REBUILD_TABLE}", sql.replace(name, other, 1), count=1)
            else:
                sql = sql.replace(f"TABLE {MAIN_TABLE}", f"TABLE {REBUILD_TABLE}", 1)
                sql = sql.replace(f'TABLE "{MAIN_TABLE}"', f"TABLE {REBUILD_TABLE}", 1)
            cur.execute(sql)

    def close(self) -> None:
        self._conn.close()
