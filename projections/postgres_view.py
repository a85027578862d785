"""The status view on PostgreSQL (a small psycopg pool, in the store's schema)."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterator, Sequence
from uuid import UUID

from psycopg_pool import ConnectionPool

from ledger.config import Database
from ledger.errors import ConfigurationError
from projections.rows import COLUMNS, StatusRow
from projections.sql_view import SqlStatusView
from projections.view import MAIN_TABLE, REBUILD_TABLE, Lease, NotLeaderError


class PostgresStatusView(SqlStatusView):
    """``StatusView`` on PostgreSQL; thread-safe through the pool."""

    backend = "postgres"

    def __init__(self, database: Database, *, max_size: int = 4) -> None:
        super().__init__()
        self._types: list[int] | None = None  # the status columns' type OIDs, read once
        kwargs: dict[str, Any] = {}
        if database.schema:
            kwargs["options"] = f"-c search_path={database.schema}"
        self._pool = ConnectionPool(database.conninfo(), min_size=1, max_size=max_size, kwargs=kwargs,
                                    open=True)

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            yield cur

    def _upsert(self, cur: Any, table: str, rows: list[StatusRow]) -> None:
        # Binary COPY into a staging table, then one INSERT ... ON CONFLICT: a quarter of the
        # cost of one parameterised upsert per row (docs/performance.md).
        types = self._column_types(cur)  # before the COPY: no other statement may run inside it
        cur.execute(self.queries["create_status_stage"])
        with cur.copy(f"COPY opledger_status_stage ({', '.join(COLUMNS)}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)
        cur.execute(self.queries["upsert_status"].replace("{table}", table))

    def _column_types(self, cur: Any) -> list[int]:
        if self._types is None:
            cur.execute(self.queries["select_status_types"])
            found = dict(cur.fetchall())
            if set(found) != set(COLUMNS):
                raise ConfigurationError(f"opledger_operation_status has columns {sorted(found)}, expected "
                                   f"{sorted(COLUMNS)}: run `opledger migrate`")
            self._types = [found[name] for name in COLUMNS]
        return self._types

    def _from_db(self, values: Sequence[Any]) -> StatusRow:
        # psycopg returns the session's zone (ZoneInfo 'Etc/UTC'); rows carry timezone.utc.
        return StatusRow(*(v.astimezone(timezone.utc) if isinstance(v, datetime) else v for v in values))

    def _create_rebuild_table(self, cur: Any) -> None:
        cur.execute(f"CREATE TABLE {REBUILD_TABLE} (LIKE {MAIN_TABLE} INCLUDING ALL)")

    @contextmanager
    def reserve(self, operation_ids: Sequence[UUID]) -> Iterator[set[UUID]]:
        # Transaction-scoped advisory locks, taken without waiting: a worker skips what another
        # holds, and the locks go with the transaction, after this worker's commit.
        with self._transaction() as cur:
            cur.execute(self.queries["reserve_operations"], (list(operation_ids),))
            yield {op_id for (op_id,) in cur.fetchall()}

    def _without_flush(self, cur: Any) -> None:
        cur.execute("SET LOCAL synchronous_commit = off")  # this transaction only

    def lead(self, lease: Lease, ttl_seconds: float) -> bool:
        with self._transaction() as cur:
            cur.execute(self.queries["acquire_lease"], {"name": lease.name, "holder": lease.holder, "ttl": ttl_seconds})
            return cur.fetchone() is not None

    def _check_lease(self, cur: Any, lease: Lease) -> None:
        cur.execute(self.queries["check_lease"], {"name": lease.name, "holder": lease.holder})
        if cur.fetchone() is None:
            raise NotLeaderError(f"lease {lease.name!r} is no longer held by {lease.holder!r}")

    def close(self) -> None:
        self._pool.close()
