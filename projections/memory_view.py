"""The status view in memory: for tests and the deterministic simulator, with no threads.

A :class:`MemoryStatusStore` holds the read model's tables (status rows, the rebuild table,
tracking positions, leadership leases, reservations, archived operations' carried-forward totals)
the way a database does; each :class:`MemoryStatusView` opened on it behaves as another
connection to that database, with the contract of the SQL views
(``tests/conformance/test_status_view.py`` runs the same suite against all three). Leases are
judged by the store's clock, as PostgreSQL judges them by its own, and several views of one store
reserve disjoint operations, as PostgreSQL workers do; so the simulator can run many workers and
projections over one store.

Every call holds the store's lock for its whole transaction, and a write checks everything
before it changes anything, so a failed write leaves no trace.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

from ledger.clock import Clock, SystemClock, require_utc
from ledger.status import Status
from migrations.drivers import ArchiveLabels
from projections.rows import AttentionMark, DueRow, StatusRow
from projections.view import MAIN_TABLE, REBUILD_TABLE, Lease, NotLeaderError, OperationFilter

_STATUSES = frozenset(status.value for status in Status)  # the tables' CHECK (status IN ...)
_TIME_FIELDS = ("lease_expires_at", "next_due_at", "created_at", "updated_at")


@dataclass(frozen=True, slots=True)
class _HeldLease:
    holder: str
    expires_at: datetime


class MemoryStatusStore:
    """The in-memory tables of the status read model, shared by every view opened on it.

    Args:
        clock: the store's own clock (UTC), by which leases are taken and checked; the
            simulator passes its fake clock. Defaults to the wall clock.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.lock = threading.Lock()
        """Held by a view for each whole call (one transaction)."""
        self.tables: dict[str, dict[UUID, StatusRow]] = {MAIN_TABLE: {}}
        self.tracking: dict[tuple[str, str], int] = {}
        self.leases: dict[str, _HeldLease] = {}
        self.reserved: set[UUID] = set()
        self.archive_totals: Counter[ArchiveLabels] = Counter()
        """Archived operations by final status and label set, added in by :meth:`MemoryStatusView.counts`
        (docs/adr/0010-archives.md, "As built"): the store driver's ``archive_record`` adds to them."""

    def status_rows(self) -> dict[UUID, StatusRow]:
        """The live status rows by operation id: what the memory store driver's archive methods
        select and remove once this store is bound to it (``MemoryDriver.status``). Call under
        :attr:`lock`."""
        return self.tables[MAIN_TABLE]

    def open_view(self) -> MemoryStatusView:
        """A new view of this store (as ``open_view(store)``)."""
        return MemoryStatusView(self)


class MemoryStatusView:
    """``StatusView`` over a :class:`MemoryStatusStore`. Thread-safe; starts no threads.

    Args:
        store: the tables to read and write; a new, empty store when omitted.
    """

    in_process = True

    def __init__(self, store: MemoryStatusStore | None = None) -> None:
        self.store = store or MemoryStatusStore()
        self._closed = False

    # -- ProjectionWriter
    def position(self, projection: str, upstream: str) -> int:
        with self._transaction() as store:
            return store.tracking.get((projection, upstream), 0)

    def write(self, rows: Iterable[StatusRow], *, projection: str, upstream: str, position: int,
              table: str = MAIN_TABLE, lease: Lease | None = None,
              marks: Mapping[UUID, AttentionMark] | None = None) -> None:
        batch = [_checked(row) for row in rows]
        marks = dict(marks or {})
        with self._transaction() as store:
            if lease is not None and not _holds(store, lease):
                raise NotLeaderError(f"lease {lease.name!r} is no longer held by {lease.holder!r}")
            target = _table(store, table)
            if len({row.operation_id for row in batch}) < len(batch):
                # PostgreSQL refuses a batch that names one operation twice (an upsert may not
                # change a row twice); the contract says at most one row per operation.
                raise ValueError("a status write holds two rows of one operation")
            for row in batch:
                stored = target.get(row.operation_id)
                if stored is None or row.version > stored.version:
                    target[row.operation_id] = row
            for operation_id, mark in marks.items():
                stored = target.get(operation_id)
                if stored is not None:
                    target[operation_id] = stored._replace(attention=mark.reason, attention_detail=mark.detail,
                                                           next_due_at=None)
            store.tracking[(projection, upstream)] = position

    def begin_rebuild(self) -> None:
        with self._transaction() as store:
            store.tables[REBUILD_TABLE] = {}

    def finish_rebuild(self, *, projection: str, upstream: str, position: int) -> None:
        with self._transaction() as store:
            store.tables[MAIN_TABLE] = _table(store, REBUILD_TABLE)
            del store.tables[REBUILD_TABLE]
            store.tracking[(projection, upstream)] = position

    # -- Leadership
    def lead(self, lease: Lease, ttl_seconds: float) -> bool:
        with self._transaction() as store:
            now = store.clock.now()
            held = store.leases.get(lease.name)
            # As acquire_lease.sql: take a free or expired lease, or extend our own.
            if held is None or held.holder == lease.holder or held.expires_at < now:
                store.leases[lease.name] = _HeldLease(lease.holder, now + timedelta(seconds=ttl_seconds))
                return True
            return False

    # -- DueWork
    def lease_clock(self, local: Clock, *, max_skew_seconds: float) -> Clock:
        # One process, one clock (the store's leases are judged by the clock it was given).
        return local

    def due(self, now: datetime, limit: int) -> list[DueRow]:
        now = require_utc(now, "now")
        _check_limit(limit)
        with self._transaction() as store:
            found = [row for row in store.tables[MAIN_TABLE].values()
                     if row.next_due_at is not None and row.next_due_at <= now]
        found.sort(key=lambda row: (row.next_due_at, row.operation_id))
        return [DueRow(row.operation_id, row.version, row.execution, row.settlement, row.cancel_requested)
                for row in found[:limit]]

    @contextmanager
    def reserve(self, operation_ids: Sequence[UUID]) -> Iterator[set[UUID]]:
        with self._transaction() as store:
            mine = set(operation_ids) - store.reserved
            store.reserved |= mine
        try:
            yield set(mine)
        finally:
            with self.store.lock:  # released even when the view was closed meanwhile
                self.store.reserved -= mine

    # -- OperatorQueries
    def get(self, operation_id: UUID) -> StatusRow | None:
        with self._transaction() as store:
            return store.tables[MAIN_TABLE].get(operation_id)

    def get_many(self, operation_ids: Collection[UUID]) -> dict[UUID, StatusRow]:
        with self._transaction() as store:
            table = store.tables[MAIN_TABLE]
            return {op_id: table[op_id] for op_id in operation_ids if op_id in table}

    def attention(self, limit: int = 100) -> list[StatusRow]:
        _check_limit(limit)
        with self._transaction() as store:
            found = [row for row in store.tables[MAIN_TABLE].values() if row.attention is not None]
        found.sort(key=lambda row: (row.updated_at, row.operation_id))
        return found[:limit]

    def attention_of(self, reason: str, limit: int = 100) -> list[StatusRow]:
        return [row for row in self.attention(limit=2**62) if row.attention == reason][:limit]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        with self._transaction() as store:
            for row in store.tables[MAIN_TABLE].values():
                counts[row.status] = counts.get(row.status, 0) + 1
            # Archived operations count as they did before they left (docs/adr/0010-archives.md).
            for (status, *_), n in store.archive_totals.items():
                counts[status] = counts.get(status, 0) + n
        return counts

    # Last of the queries: below it, ``list`` in an annotation would name this method (mypy).
    def search(self, where: OperationFilter) -> list[StatusRow]:
        _check_limit(where.limit)
        with self._transaction() as store:
            found = [row for row in store.tables[MAIN_TABLE].values() if where.matches(row)]
        if where.after is not None:
            at, op_id = where.after
            found = [row for row in found if row.created_at < at or (row.created_at == at and row.operation_id > op_id)]
        found.sort(key=lambda row: row.operation_id)
        found.sort(key=lambda row: row.created_at, reverse=True)  # stable: ties keep id order
        return found[:where.limit]

    def list(self, *, status: str | None = None, limit: int = 100) -> list[StatusRow]:
        _check_limit(limit)
        with self._transaction() as store:
            found = [row for row in store.tables[MAIN_TABLE].values() if status is None or row.status == status]
        found.sort(key=lambda row: row.operation_id)
        found.sort(key=lambda row: row.created_at, reverse=True)  # stable: ties keep id order
        return found[:limit]

    def close(self) -> None:
        self._closed = True

    @contextmanager
    def _transaction(self) -> Iterator[MemoryStatusStore]:
        if self._closed:
            raise RuntimeError("this status view is closed")
        with self.store.lock:
            yield self.store


def _table(store: MemoryStatusStore, name: str) -> dict[UUID, StatusRow]:
    try:
        return store.tables[name]
    except KeyError:
        raise LookupError(f"no table {name!r} (a rebuild table exists only after begin_rebuild)") from None


def _holds(store: MemoryStatusStore, lease: Lease) -> bool:
    # As check_lease.sql: ours, and not yet expired by the store's clock.
    held = store.leases.get(lease.name)
    return held is not None and held.holder == lease.holder and held.expires_at > store.clock.now()


def _check_limit(limit: int) -> None:
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")  # as PostgreSQL's LIMIT


def _checked(row: StatusRow) -> StatusRow:
    """``row`` as the SQL tables would hold it: their CHECK constraints, times in UTC."""
    if row.status not in _STATUSES:
        raise ValueError(f"status {row.status!r} is not one of {sorted(_STATUSES)}")
    if not 0 <= row.attempts <= row.max_attempts:
        raise ValueError(f"attempts {row.attempts} outside 0..max_attempts ({row.max_attempts})")
    times = {name: value.astimezone(UTC) for name in _TIME_FIELDS
             if (value := getattr(row, name)) is not None and value.tzinfo is not UTC}
    return row._replace(**times) if times else row
