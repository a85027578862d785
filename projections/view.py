"""The status view seam: small protocols by concern and their union ``StatusView``; three
backends (``sqlite_view``, ``postgres_view``, ``memory_view``, opened by
``projections.views.open_view``) are held to one conformance suite (STYLE rules 6 and 8).

Rows and the projection's tracking position are written in one transaction (DESIGN §8), so a
crash or a replay never double-counts. SQL comes from ``migrations/<backend>/queries``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from uuid import UUID

from ledger.clock import Clock
from ledger.errors import LedgerError
from projections.rows import AttentionMark, DueRow, StatusRow

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


class TrackingReads(Protocol):
    """How far a projection has applied the log (DESIGN §8)."""

    def position(self, projection: str, upstream: str) -> int:
        """The last notification id applied by ``projection`` from ``upstream`` (0 if none)."""
        ...


class ProjectionWriter(TrackingReads, Protocol):
    """The projection's side of the view: its tracking position, its rows, and rebuild."""

    in_process: bool
    """True where the store does its work inside this process (embedded SQLite, the in-memory
    store), so waiting on it frees no CPU for other threads of the process; False for a
    database server."""

    def write(self, rows: Iterable[StatusRow], *, projection: str, upstream: str, position: int,
              table: str = MAIN_TABLE, lease: Lease | None = None,
              marks: Mapping[UUID, AttentionMark] | None = None) -> None:
        """Upsert ``rows`` into ``table``, mark the ``marks`` operations, and set the position,
        all in one transaction.

        A row replaces the stored one only when its ``version`` is greater: a stale writer, or
        the same version written again, changes nothing. The position is set as given (it may
        move back). Marks apply after the rows, whatever their version, to rows that exist.

        Args:
            rows: at most one row per operation.
            table: ``MAIN_TABLE``, or ``REBUILD_TABLE`` between ``begin_rebuild`` and
                ``finish_rebuild``.
            marks: operations whose stored events cannot be folded, by id: their rows go on the
                attention queue with the mark's reason (``unreadable_event``, ``corrupt_record``)
                and detail, and stop being due.

        Raises:
            NotLeaderError: ``lease`` is given and no longer held; nothing was written.
        """
        ...

    def begin_rebuild(self) -> None:
        """Create an empty rebuild table shaped like the main one (dropping any leftover)."""
        ...

    def finish_rebuild(self, *, projection: str, upstream: str, position: int) -> None:
        """Swap the rebuild table in and set the position, in one transaction."""
        ...


class Leadership(Protocol):
    """One projection writer per store, by a named lease (DESIGN §8)."""

    def lead(self, lease: Lease, ttl_seconds: float) -> bool:
        """Take or extend ``lease`` for ``ttl_seconds``, judged by the store's clock; True when
        this holder now leads. Where one process owns the store (SQLite), always True."""
        ...


class DueWork(Protocol):
    """The workers' side: what is due, and reservations among workers of one store."""

    in_process: bool
    """As ``ProjectionWriter.in_process``: where True, one process owns the store and its
    workers reserve through the view alone."""

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
        a duplicate. Where one process owns the store (SQLite), every id is yielded.
        """
        ...


class ClaimView(DueWork, TrackingReads, Protocol):
    """What the due-work pass uses (``executors.claim``): due rows, reservations, and the status
    projection's position (its log tail reads past it)."""


@dataclass(frozen=True)
class OperationFilter:
    """Which status rows :meth:`OperatorQueries.search` returns; a field left None matches all.

    Attributes:
        status: a derived status (``ledger.status.Status``); an outcome status (``failed``,
            ``succeeded``, ``ambiguous``, ``cancelled``) also matches operations whose outcome
            it is and whose settlement moved the status on (a settled failure is ``failed``).
        integration: integration name.
        tenant: tenant.
        attention: an attention reason, or ``*`` for any.
        outcome: execution state (``failed``, ``succeeded``, ...), settled or not.
        approval: ``required``, ``granted``, ``denied`` or ``not_required``.
        since: created at or after this instant (UTC).
        entity_type: the source entity's type (topic).
        entity_id: the source entity's id.
        after: keyset cursor: the ``(created_at, operation_id)`` of the last row already seen.
        limit: rows at most (1 to 100,000).

    Source: issue 13 items 2 and 6.
    """

    status: str | None = None
    integration: str | None = None
    tenant: str | None = None
    attention: str | None = None
    outcome: str | None = None
    approval: str | None = None
    since: datetime | None = None
    entity_type: str | None = None
    entity_id: UUID | None = None
    after: tuple[datetime, UUID] | None = None
    limit: int = 100

    def matches(self, row: StatusRow) -> bool:
        """Whether ``row`` passes every filter (the cursor and limit aside). The SQL views run
        the same rule as ``select_search``; the conformance suite holds them together."""
        checks = (
            self.status is None or self.status in (row.status, row.execution),
            self.integration is None or row.integration == self.integration,
            self.tenant is None or row.tenant == self.tenant,
            self.attention is None or row.attention == self.attention
            or (self.attention == "*" and row.attention is not None),
            self.outcome is None or row.execution == self.outcome,
            self.approval is None or row.approval == self.approval,
            self.since is None or row.created_at >= self.since,
            self.entity_type is None or row.source_entity_type == self.entity_type,
            self.entity_id is None or row.source_entity_id == self.entity_id,
        )
        return all(checks)


class OperatorQueries(Protocol):
    """What operators and the CLI read (the main table only)."""

    def get(self, operation_id: UUID) -> StatusRow | None:
        """One row, or None."""
        ...

    def get_many(self, operation_ids: Collection[UUID]) -> dict[UUID, StatusRow]:
        """The rows of ``operation_ids`` in one read, by id; ids without a row are left out.
        For callers that read many rows at once (the archive run), where a ``get`` per id
        would cost a round trip each."""
        ...

    def attention(self, limit: int = 100) -> list[StatusRow]:
        """The attention queue: rows with an attention reason, oldest first (``updated_at``,
        then operation id)."""
        ...

    def attention_of(self, reason: str, limit: int = 100) -> list[StatusRow]:
        """The attention queue's rows of one ``reason``, oldest first."""
        ...

    def counts(self) -> dict[str, int]:
        """Number of operations per status."""
        ...

    def search(self, where: OperationFilter) -> list[StatusRow]:
        """Rows passing ``where``, newest first (``created_at`` descending, then operation id),
        after its cursor, at most ``where.limit``."""
        ...

    # Last in the class: below it, ``list`` in an annotation would name this method (mypy).
    def list(self, *, status: str | None = None, limit: int = 100) -> list[StatusRow]:
        """Rows, newest first (``created_at`` descending, then operation id), optionally of one
        status."""
        ...


class StatusView(ProjectionWriter, Leadership, DueWork, OperatorQueries, Protocol):
    """Read and write the operation status read model: every concern above, on one store.

    Backends: ``SQLiteStatusView``, ``PostgresStatusView`` and ``MemoryStatusView``; one
    conformance suite (``tests/conformance/test_status_view.py``) holds them to one contract.
    """

    def close(self) -> None:
        """Release connections; the view cannot be used afterwards."""
        ...
