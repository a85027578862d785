"""The status view on PostgreSQL (a small psycopg pool, in the store's schema).

Many workers on many hosts share this store, so it also keeps their clocks: a worker that asks
for :meth:`PostgresStatusView.lease_clock` selects due work by the database's time and gets a
clock that follows the database's, corrected by every ``due()`` read (DESIGN §7).
"""

from __future__ import annotations

import select
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
import structlog
from psycopg import Connection
from psycopg_pool import ConnectionPool

from ledger.clock import Clock, ReferenceClock, SkewWarning
from ledger.config import Database
from ledger.errors import ConfigurationError
from migrations.drivers import database_driver
from migrations.drivers.notify import status_channel
from migrations.drivers.postgres import reservations_release
from projections.rows import COLUMNS, DueRow, StatusRow
from projections.sql_view import SqlStatusView
from projections.view import MAIN_TABLE, REBUILD_TABLE, Lease, NotLeaderError

log = structlog.get_logger("opledger.clock")


class PostgresStatusView(SqlStatusView):
    """``StatusView`` on PostgreSQL; thread-safe through the pool."""


    def __init__(self, database: Database, *, max_size: int = 4) -> None:
        max_size = min(max_size, database.pool_size)
        super().__init__(database_driver(database).queries)
        self._types: list[int] | None = None  # the status columns' type OIDs, read once
        self._clock: ReferenceClock | None = None  # set by lease_clock; fed by every due()
        self.channel = status_channel(database.schema)
        """The channel each write NOTIFYs (``migrations.drivers.notify``)."""
        kwargs: dict[str, Any] = {}
        if database.schema:
            kwargs["options"] = f"-c search_path={database.schema}"
        # autocommit: a single reading statement (``_statement``) is one round trip, not three
        # (BEGIN, the statement, COMMIT); ``_transaction`` still opens a transaction.
        # check: a connection the server dropped while it sat in the pool (a restart, an admin's
        # pg_terminate_backend) is replaced when taken, not handed to a query (issue 17).
        self._pool = ConnectionPool(database.conninfo(), min_size=1, max_size=max_size,
                                    kwargs={**kwargs, "autocommit": True}, check=check_dropped, open=True)

    @property
    def pool(self) -> ConnectionPool:
        """The view's connection pool (``ledger.outages.refresh_connections`` checks it after an
        outage)."""
        return self._pool

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            yield cur

    @contextmanager
    def _statement(self) -> Iterator[Any]:
        with self._pool.connection() as conn, conn.cursor() as cur:
            yield cur

    def _notify(self, cur: Any) -> None:
        # Delivered at commit; workers LISTEN (migrations.drivers.notify) and look for due work at once.
        cur.execute(self.queries["notify_status"], (self.channel,))

    def _upsert(self, cur: Any, table: str, rows: list[StatusRow]) -> None:
        # Binary COPY into a staging table, then one INSERT ... ON CONFLICT: a quarter of the
        # cost of one parameterised upsert per row (docs/performance.md).
        types = self._column_types(cur)  # before the COPY: no other statement may run inside it
        cur.execute(self.queries["create_status_stage"])
        with cur.copy(self.queries["copy_status_stage"].format(columns=", ".join(COLUMNS))) as copy:
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
        return StatusRow._make(v.astimezone(UTC) if isinstance(v, datetime) else v for v in values)

    def _create_rebuild_table(self, cur: Any) -> None:
        cur.execute(self.queries["create_rebuild_table"].format(rebuild=REBUILD_TABLE, main=MAIN_TABLE))

    def lease_clock(self, local: Clock, *, max_skew_seconds: float) -> Clock:
        """Follow the database's clock from now on: ``due()`` compares with the database's time
        and each of its reads corrects the returned clock (one round trip is read here, at once).

        Args:
            local: this process's own clock, UTC; only its skew is measured and reported.
            max_skew_seconds: a local clock further than this from the database's is logged as a
                warning now and every minute while it stays so, seconds.

        Returns:
            A :class:`ledger.clock.ReferenceClock` following the database's ``clock_timestamp()``.

        Source: DESIGN §7 ("on PostgreSQL, lease expiry is judged by the database's clock");
        ADR 0001, "Leases and clocks" (the window that remains).
        """
        clock = ReferenceClock(local, max_skew_seconds=max_skew_seconds)
        with self._transaction() as cur:
            sent = clock.started()
            cur.execute(self.queries["select_database_time"])
            (database_now,) = cur.fetchone()
            _report(clock.observe(database_now, sent=sent))
        reading = clock.reading
        assert reading is not None
        log.info("following the database's clock", offset_seconds=round(reading.offset_seconds, 3),
                 error_seconds=round(reading.error_seconds, 4), max_skew_seconds=max_skew_seconds)
        self._clock = clock
        return clock

    def due(self, now: datetime, limit: int) -> list[DueRow]:
        clock = self._clock
        with self._statement() as cur:
            sent = clock.started() if clock is not None else 0.0
            # With a lease clock, the database's own time decides what is due (now=NULL).
            cur.execute(self.queries["select_due"], {"now": None if clock is not None else now, "limit": limit})
            rows = cur.fetchall()
            if clock is not None:
                _report(clock.observe(rows[0][0], sent=sent))
        return [DueRow(op_id, version, execution, settlement, bool(cancel))
                for _, op_id, version, execution, settlement, cancel in rows if op_id is not None]

    @contextmanager
    def reserve(self, operation_ids: Sequence[UUID]) -> Iterator[set[UUID]]:
        # Session-level advisory locks, taken without waiting (a worker skips what another
        # holds) in one round trip, and released when the block ends, raised or not
        # (``reservations_release``). A reservation that failed (a statement timeout, a cancel)
        # may have taken locks unseen: its connection is closed, and the server drops them.
        with self._pool.connection() as conn, conn.cursor() as cur:
            try:
                cur.execute(self.queries["reserve_operations"], (list(operation_ids),), prepare=True)
                held: list[UUID] = [op_id for (op_id,) in cur.fetchall()]
            except BaseException:
                conn.close()
                raise
            try:
                yield set(held)
            finally:
                reservations_release(conn, cur, self.queries["release_operations"], held)

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


def check_dropped(conn: Connection[Any]) -> None:
    """The pool's check of a connection it hands out, in one round trip only when needed: a
    connection the server closed while it sat in the pool (a restart, ``pg_terminate_backend``)
    has its socket readable (the server's last message, or end of file), and only then is a
    query sent, which raises, so the pool replaces it. A check by query on every checkout was
    one more round trip before each of a worker's reads (docs/performance.md).

    Raises:
        psycopg.OperationalError: the connection is dead (the pool discards it and takes another).
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:  # a healthy idle connection has nothing to read: the server said something
        ConnectionPool.check_connection(conn)


def _report(warning: SkewWarning | None) -> None:
    if warning is not None:
        log.warning("this worker's clock is off the database's; leases are judged by the database's clock",
                    offset_seconds=round(warning.offset_seconds, 3), error_seconds=round(warning.error_seconds, 4),
                    max_skew_seconds=warning.max_skew_seconds, repeats_every_seconds=60)
