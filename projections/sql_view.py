"""The SQL status view shared by both backends; subclasses supply connections and types."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any
from uuid import UUID

from ledger import failpoints
from ledger.clock import Clock
from projections.rows import AttentionMark, DueRow, StatusRow, due_when_written
from projections.view import MAIN_TABLE, REBUILD_TABLE, Lease, OperationFilter


class SqlStatusView:
    """``StatusView`` over DB-API connections. Subclasses implement ``_transaction`` (a context
    manager yielding a cursor, committing on success), ``_upsert`` and ``_from_db``; they may
    override ``_statement`` (a cursor for one reading statement)."""

    in_process: bool = False

    def __init__(self, queries: Mapping[str, str]) -> None:
        self.queries = queries

    # -- hooks
    def _transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _statement(self) -> AbstractContextManager[Any]:
        """A cursor for one reading statement; by default a transaction of its own."""
        return self._transaction()

    def _upsert(self, cur: Any, table: str, rows: list[StatusRow]) -> None:
        """Insert or replace ``rows`` in ``table``, in ``cur``'s transaction; a row never replaces
        one of a newer version. Where several processes write, rows are taken in operation id
        order, so two writers lock them in the same order and cannot deadlock."""
        raise NotImplementedError

    def _from_db(self, values: Sequence[Any]) -> StatusRow:
        raise NotImplementedError

    def _create_rebuild_table(self, cur: Any) -> None:
        raise NotImplementedError

    def _without_flush(self, cur: Any) -> None:
        """Let this read-model transaction commit without waiting for its log flush: rows and
        tracking position commit together and are rebuilt from the event log, so a crash may
        lose the last few, never part of one. Nothing to do where the connection is set so."""

    # -- StatusView
    def position(self, projection: str, upstream: str) -> int:
        with self._statement() as cur:
            cur.execute(self.queries["select_tracking"], {"projection": projection, "upstream": upstream})
            found = cur.fetchone()
        return int(found[0]) if found else 0

    def write(self, rows: Iterable[StatusRow], *, projection: str, upstream: str, position: int,
              table: str = MAIN_TABLE, lease: Lease | None = None,
              marks: Mapping[UUID, AttentionMark] | None = None) -> None:
        batch = list(rows)
        with self._transaction() as cur:
            self._without_flush(cur)
            if lease is not None:
                self._check_lease(cur, lease)
            if batch:
                self._upsert(cur, table, batch)
            failpoints.reached("projection")  # process tests: SIGKILL mid-batch (ledger.failpoints)
            for operation_id, mark in (marks or {}).items():
                cur.execute(self.queries["mark_attention"].replace("opledger_operation_status", table),
                            {"operation_id": self._id(operation_id), "attention": mark.reason, "detail": mark.detail})
            cur.execute(self.queries["upsert_tracking"],
                        {"projection": projection, "upstream": upstream, "notification_id": position})
            if table == MAIN_TABLE and any(due_when_written(row) for row in batch):
                self._notify(cur)

    def _notify(self, cur: Any) -> None:
        """Tell listening workers that rows changed, in the write's transaction (PostgreSQL;
        a single-owner backend has no one to tell)."""

    def due(self, now: datetime, limit: int) -> list[DueRow]:
        with self._statement() as cur:
            cur.execute(self.queries["select_due"], {"now": self._time(now), "limit": limit})
            return [DueRow(self._uuid(op_id), version, execution, settlement, bool(cancel))
                    for op_id, version, execution, settlement, cancel in cur.fetchall()]

    @contextmanager
    def reserve(self, operation_ids: Sequence[UUID]) -> Iterator[set[UUID]]:
        yield set(operation_ids)  # a single-owner backend (SQLite): no other worker to avoid

    def get(self, operation_id: UUID) -> StatusRow | None:
        rows = self._select("select_one", {"operation_id": self._id(operation_id)})
        return rows[0] if rows else None

    def get_many(self, operation_ids: Collection[UUID]) -> dict[UUID, StatusRow]:
        rows = self._select("select_by_ids", {"operation_ids": self._ids(operation_ids)})
        return {row.operation_id: row for row in rows}

    def attention(self, limit: int = 100) -> list[StatusRow]:
        return self._select("select_attention", {"limit": limit})

    def attention_of(self, reason: str, limit: int = 100) -> list[StatusRow]:
        return self._select("select_attention_of", {"attention": reason, "limit": limit})

    def counts(self) -> dict[str, int]:
        with self._statement() as cur:
            cur.execute(self.queries["count_by_status"])
            found = Counter({str(status): int(n) for status, n in cur.fetchall()})
            # Archived operations count as they did before they left (docs/adr/0010-archives.md).
            cur.execute(self.queries["select_archive_totals"])
            for status, _, _, _, n in cur.fetchall():
                found[str(status)] += int(n)
        return dict(found)

    def search(self, where: OperationFilter) -> list[StatusRow]:
        after_at, after_id = where.after or (None, None)
        params = {
            "status": where.status, "integration": where.integration, "tenant": where.tenant,
            "attention": where.attention, "outcome": where.outcome, "approval": where.approval,
            "since": None if where.since is None else self._time(where.since),
            "entity_type": where.entity_type,
            "entity_id": None if where.entity_id is None else self._id(where.entity_id),
            "after_at": None if after_at is None else self._time(after_at),
            "after_id": None if after_id is None else self._id(after_id),
            "limit": where.limit,
        }
        return self._select("select_search", params)

    def begin_rebuild(self) -> None:
        with self._transaction() as cur:
            cur.execute(self.queries["drop_rebuild_table"].format(rebuild=REBUILD_TABLE))
            self._create_rebuild_table(cur)

    def finish_rebuild(self, *, projection: str, upstream: str, position: int) -> None:
        # The main table's triggers (the counters of schema 0009) go with it when it is dropped:
        # they are recreated on the table swapped in, which is then counted once.
        with self._transaction() as cur:
            cur.execute(self.queries["select_table_triggers"], {"table": MAIN_TABLE})
            triggers = [str(sql) for (sql,) in cur.fetchall()]
            cur.execute(self.queries["drop_main_table"].format(main=MAIN_TABLE))
            cur.execute(self.queries["rename_rebuild_table"].format(rebuild=REBUILD_TABLE, main=MAIN_TABLE))
            for trigger in triggers:
                cur.execute(trigger)
            cur.execute(self.queries["delete_status_counts"])
            cur.execute(self.queries["insert_status_counts"].format(main=MAIN_TABLE))
            cur.execute(self.queries["upsert_tracking"],
                        {"projection": projection, "upstream": upstream, "notification_id": position})

    def lease_clock(self, local: Clock, *, max_skew_seconds: float) -> Clock:
        return local  # one process owns the store (SQLite): its clock is the only one

    def lead(self, lease: Lease, ttl_seconds: float) -> bool:
        return True  # a single-writer backend: the owning process always leads

    def _check_lease(self, cur: Any, lease: Lease) -> None:
        pass

    # -- helpers
    def _select(self, name: str, params: dict[str, Any]) -> list[StatusRow]:
        with self._statement() as cur:
            cur.execute(self.queries[name], params)
            return [self._from_db(values) for values in cur.fetchall()]

    def _time(self, value: datetime) -> Any:
        return value

    def _id(self, value: UUID) -> Any:
        return value

    def _ids(self, values: Collection[UUID]) -> Any:
        return list(values)

    def _uuid(self, value: Any) -> UUID:
        return value

    # Last in the class: below it, ``list`` in an annotation would name this method (mypy).
    def list(self, *, status: str | None = None, limit: int = 100) -> list[StatusRow]:
        return self._select("select_many", {"status": status, "limit": limit})
