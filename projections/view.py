"""The status view seam: one small protocol, two backends (STYLE rule 6).

Rows and the projection's tracking position are written in one transaction (DESIGN §8), so a
crash or a replay never double-counts. SQL comes from ``migrations/<backend>/queries``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from contextlib import AbstractContextManager
from typing import Iterable, Protocol, Sequence
from uuid import UUID

from ledger.clock import Clock
from ledger.config import Database
from ledger.errors import LedgerError
from projections.rows import DueRow, StatusRow

MAIN_TABLE = "opledger_operation_status"
REBUILD_TABLE = "opledger_operation_status_rebuild"


@dataclass(frozen=True)
class Lease:
    """A named leadership lease and its would-be holder (one projection writer per store)."""

    name: str
    holder: str


class NotLeaderError(LedgerError):
    """A projection write was refused because this process no longer holds the leadership lease.

    Another process took over after this one stalled; nothing was written. Fix: none.
    """


class StatusView(Protocol):
    """Read and write the operation status read model."""

    in_process: bool
    """True where the store does its work inside this process (embedded SQLite), so waiting on
    it frees no CPU for other threads of the process; False for a database server."""

    def position(self, projection: str, upstream: str) -> int:
        """The last notification id applied by ``projection`` from ``upstream`` (0 if none)."""
        ...

    def write(self, rows: Iterable[StatusRow], *, projection: str, upstream: str, position: int,
              table: str = MAIN_TABLE, lease: Lease | None = None, corrupt: Iterable[UUID] = ()) -> None:
        """Upsert ``rows`` into ``table``, mark the ``corrupt`` operations, and set the position,
        all in one transaction.

        Args:
            corrupt: operations whose stored events cannot be decoded: their rows go on the
                attention queue (``corrupt_record``) and stop being due.

        Raises:
            NotLeaderError: ``lease`` is given and no longer held; nothing was written.
        """
        ...

    def lead(self, lease: Lease, ttl_seconds: float) -> bool:
        """Take or extend ``lease`` for ``ttl_seconds``; True when this holder now leads."""
        ...

    def due(self, now: datetime, limit: int) -> list[DueRow]:
        """Rows whose ``next_due_at`` is at or before ``now`` (UTC), earliest first.

        After :meth:`lease_clock` on a shared database, "now" is the database's time, read in
        the same statement, and ``now`` is not used.
        """
        ...

    def lease_clock(self, local: Clock, *, max_skew_seconds: float) -> Clock:
        """The clock a worker of this store judges leases by (DESIGN §7).

        Args:
            local: the process's own clock (UTC).
            max_skew_seconds: a local clock further than this from the store's is reported as a
                warning at once and every minute, seconds.

        Returns:
            ``local`` where one process owns the store (SQLite). On PostgreSQL, a clock following
            the database's, refreshed by every later :meth:`due`, which from then on selects by
            the database's time.

        Source: DESIGN §7; issue 10, item 4; ADR 0001, "Leases and clocks".
        """
        ...

    def reserve(self, operation_ids: Sequence[UUID]) -> AbstractContextManager[set[UUID]]:
        """Reserve operations for this worker's next commit, so concurrent workers of the same
        store mostly pick different operations: yields the ids no other worker holds, and holds
        them until the context exits (after the commit).

        A hint against wasted conflicts, never a guarantee: fencing stays with the aggregate's
        version and epoch (DESIGN §7), so a missed or lost reservation costs a conflict, never
        a duplicate.
        """
        ...

    def get(self, operation_id: UUID) -> StatusRow | None:
        """One row, or None."""
        ...

    def list(self, *, status: str | None = None, limit: int = 100) -> list[StatusRow]:
        """Rows, newest first, optionally of one status."""
        ...

    def attention(self, limit: int = 100) -> list[StatusRow]:
        """The attention queue: rows with an attention reason, oldest first."""
        ...

    def counts(self) -> dict[str, int]:
        """Number of operations per status."""
        ...

    def begin_rebuild(self) -> None:
        """Create an empty rebuild table shaped like the main one (dropping any leftover)."""
        ...

    def finish_rebuild(self, *, projection: str, upstream: str, position: int) -> None:
        """Swap the rebuild table in and set the position, in one transaction."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


def open_view(database: Database, *, read_only: bool = False) -> StatusView:
    """Open the status view of ``database``'s backend.

    Args:
        database: where the store lives (must be migrated).
        read_only: SQLite only: open for inspection without taking part in writes.
    """
    if database.backend == "sqlite":
        from projections.sqlite_view import SQLiteStatusView

        return SQLiteStatusView(database, read_only=read_only)
    from projections.postgres_view import PostgresStatusView

    return PostgresStatusView(database)
