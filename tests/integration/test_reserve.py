"""``StatusView.reserve``: concurrent workers of one store pick disjoint operations; the
PostgreSQL view's pool replaces connections the server dropped."""

from __future__ import annotations

import time
from uuid import uuid4

import psycopg
import pytest

from ledger.config import Database
from projections.postgres_view import PostgresStatusView, check_dropped
from projections.views import open_view
from tests.conftest import PG_URL, require_postgres


def test_two_reservations_never_share_an_operation_and_end_with_the_context(migrated: Database) -> None:
    ids = [uuid4() for _ in range(50)]
    first, second = open_view(migrated), open_view(migrated)
    try:
        with first.reserve(ids[:30]) as mine:
            assert mine == set(ids[:30])
            with second.reserve(ids) as theirs:
                if migrated.backend == "postgres":
                    assert theirs == set(ids[30:]), "a reserved operation was handed to a second worker"
                else:
                    assert theirs == set(ids)  # one owner per SQLite store: nothing to avoid
        with second.reserve(ids) as after:
            assert after == set(ids), "reservations outlived their context"
    finally:
        first.close()
        second.close()


def test_a_reservation_whose_commit_raised_is_released_all_the_same(migrated: Database) -> None:
    # On PostgreSQL the locks are the session's: the connection that holds them is closed, so
    # neither another worker nor a later checkout of this pool finds them still held.
    ids = [uuid4() for _ in range(5)]
    first, second = open_view(migrated), open_view(migrated)
    try:
        with pytest.raises(RuntimeError), first.reserve(ids) as mine:
            assert mine == set(ids)
            raise RuntimeError("the commit failed")
        with second.reserve(ids) as theirs:
            assert theirs == set(ids)
        for _ in range(3):  # whichever pooled connection it gets
            with first.reserve(ids) as again:
                assert again == set(ids)
    finally:
        first.close()
        second.close()


@pytest.mark.postgres
def test_a_pooled_connection_the_server_dropped_is_replaced_before_it_is_used() -> None:
    """``check_dropped`` finds a connection terminated while it sat in the view's pool without
    a query on healthy ones, and the pool hands out a fresh one: the reader never sees an error."""
    require_postgres()
    view = PostgresStatusView(Database.parse(PG_URL), max_size=1)
    try:
        with view.pool.connection() as conn:
            pid = conn.info.backend_pid
            check_dropped(conn)  # healthy and idle: nothing to read, no error
        with psycopg.connect(Database.parse(PG_URL).conninfo(), autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        for _ in range(100):  # the server's goodbye reaches the socket
            with view.pool.connection() as conn:  # the check runs on checkout
                if conn.info.backend_pid != pid:
                    break
            time.sleep(0.01)
        with view._statement() as cur:  # what due() and position() use
            cur.execute("SELECT pg_backend_pid()")
            assert cur.fetchone()[0] != pid
    finally:
        view.close()
