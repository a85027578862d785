"""The PostgreSQL view's pool replaces connections the server dropped. (That concurrent
workers of one store reserve disjoint operations is the status view conformance suite's:
``tests/conformance/test_status_view.py``.)"""

from __future__ import annotations

import time

import psycopg
import pytest

from ledger.config import Database
from projections.postgres_view import PostgresStatusView, check_dropped
from tests.conftest import PG_URL, require_postgres


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
