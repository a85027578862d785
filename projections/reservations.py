"""Reservations taken on the store's own connection (PostgreSQL), in the statement that reads.

Workers of many processes share a PostgreSQL store; a worker reserves the operations it is about
to work on so another skips them (session-level advisory locks in opledger's own class, the ones
``PostgresStatusView.reserve`` takes, so every reservation excludes every other). Here the
reservation is taken by the read itself, on a connection of the store's pool held while the
reservations are: a pickup reads and reserves new intents in one round trip, and the due-work
pass reserves only the operations that recorded nothing since the version it judged them by,
so it loads no operation another worker has moved on meanwhile (docs/performance.md).
Correctness never rests on a reservation: every commit is fenced by the operation's version.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from eventsourcing.application import Application

from migrations.queries import load_queries
from projections.loading import OpenIntents, intents_are_open, open_intents


class Reservations:
    """The reserving reads of one held connection; what they reserved is released when the
    :func:`reservations` block that made this ends.

    Args:
        cursor: a binary, tuple-row cursor of the held connection.
        table: the events table, schema-qualified and quoted.
    """

    def __init__(self, cursor: Any, table: str) -> None:
        self._cursor = cursor
        self._queries = load_queries("postgres")
        self._table = table
        self.held: list[UUID] = []
        """The operations reserved so far (released at the block's end)."""
        self.sent = False
        """Whether a reserving statement was sent: one that failed (a statement timeout, a
        cancel) may have taken locks its caller never saw."""

    def open_intents(self, after: int, limit: int, topics: Sequence[str]) -> OpenIntents:
        """``projections.loading.select_open_intents`` that also reserves each intent it
        returns; the intents another worker holds come back in ``OpenIntents.elsewhere``.

        Args:
            after: the log position the read starts after.
            limit: how many intents at most.
            topics: the ``Intended`` topics.
        """
        self.sent = True
        self._cursor.execute(self._queries["select_open_intents"].format(table=self._table),
                             [after, list(topics), limit, True], prepare=True)
        rows = self._cursor.fetchall()
        self.held.extend(row[2] for row in rows if row[6])
        return open_intents(rows, limit, frozenset(row[2] for row in rows if row[6] is False))

    def current(self, versions: Sequence[tuple[UUID, int]]) -> set[UUID]:
        """Reserve each operation of ``versions`` that recorded nothing after the given version
        and that no other worker holds.

        Args:
            versions: ``(operation id, version)`` pairs: the version the caller judged the
                operation by (its status row's, or a newer one the caller committed).

        Returns:
            The ids reserved. The others moved on (their next state is the caller's to read
            when the status view shows it) or are another worker's now.
        """
        if not versions:
            return set()
        self.sent = True
        self._cursor.execute(self._queries["reserve_current"].format(table=self._table),
                             [[op_id for op_id, _ in versions], [version for _, version in versions]], prepare=True)
        reserved = [op_id for (op_id,) in self._cursor.fetchall()]
        self.held.extend(reserved)
        return set(reserved)


@contextmanager
def reservations(app: Application) -> Iterator[Reservations]:
    """Hold one connection of the store's pool for reserving reads; release what they reserved
    when the block ends. A connection whose release did not run to the end, after a reserving
    statement was sent, is closed, and the server drops its locks: the pool never hands out a
    connection holding some (a reserving statement that failed may have taken some unseen).

    Raises:
        ValueError: the store is not on PostgreSQL (one process owns the other backends' stores:
            there is no other worker to reserve against).
    """
    from psycopg.rows import tuple_row

    if not intents_are_open(app):  # PostgreSQL
        raise ValueError("reservations are taken on the store's connection only on PostgreSQL")
    recorder: Any = app.recorder
    table = f'"{recorder.datastore.schema}"."{recorder.events_table_name}"'
    with recorder.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row, binary=True) as cursor:
        taken = Reservations(cursor, table)
        released = False
        try:
            yield taken
            if taken.held:
                cursor.execute(load_queries("postgres")["release_operations"], (taken.held,), prepare=True)
            released = True
        finally:
            if taken.sent and not released:
                conn.close()
