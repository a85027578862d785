"""The status view's lease clock (DESIGN §7; issue 10, item 4): on PostgreSQL the database's time
selects due work and corrects the worker's clock; on SQLite one process, one clock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from structlog.testing import capture_logs

from adapters.demo.orders import OrdersApp
from ledger.clock import FakeClock, OffsetClock, ReferenceClock, SystemClock
from ledger.config import Database
from projections.status import StatusProjection
from projections.view import StatusView
from projections.views import open_view
from tests.conftest import database_now

UTC = UTC


def _intend_at(database: Database, at: datetime) -> list:
    """Place one order (two operations) whose intents are due at ``at``, and project them."""
    app = OrdersApp(env=database.library_env(create_table=False), clock=FakeClock(at))
    view = open_view(database)
    try:
        _, ops = app.place_order(customer_email="c@example.test", amount_cents=100,
                                 payments_url="http://p/pay", notify_url="http://p/n")
        StatusProjection(app=app, view=view).catch_up()
        return list(ops)
    finally:
        view.close()
        app.close()


@pytest.fixture
def view(migrated: Database) -> Iterator[StatusView]:
    opened = open_view(migrated)
    try:
        yield opened
    finally:
        opened.close()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sqlite_keeps_the_process_clock(view: StatusView) -> None:
    local = FakeClock()
    assert view.lease_clock(local, max_skew_seconds=2.0) is local


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_skewed_worker_follows_the_database_and_says_so(migrated: Database, view: StatusView) -> None:
    with capture_logs() as logs:
        clock = view.lease_clock(OffsetClock(SystemClock(), 15.0), max_skew_seconds=2.0)
    assert isinstance(clock, ReferenceClock) and clock.reading is not None
    assert clock.reading.offset_seconds == pytest.approx(-15.0, abs=0.5)
    assert abs((clock.now() - database_now(migrated)).total_seconds()) < 0.5
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["offset_seconds"] == pytest.approx(-15.0, abs=0.5)
    first = clock.reading
    view.due(datetime(2000, 1, 1, tzinfo=UTC), 10)
    assert clock.reading is not first, "every due() read refreshes the clock"


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_due_work_is_chosen_by_the_database_time(migrated: Database, view: StatusView) -> None:
    db_now = database_now(migrated)
    past = set(_intend_at(migrated, db_now - timedelta(hours=1)))
    future = set(_intend_at(migrated, db_now + timedelta(hours=1)))
    # Without a lease clock, the caller's time decides (tests drive a fake clock so).
    assert {r.operation_id for r in view.due(db_now + timedelta(hours=2), 10)} == past | future
    assert view.due(db_now - timedelta(hours=2), 10) == []
    view.lease_clock(OffsetClock(SystemClock(), -15.0), max_skew_seconds=2.0)
    # With it, the database's time decides, whatever the caller's clock says.
    assert {r.operation_id for r in view.due(db_now + timedelta(hours=2), 10)} == past
    assert {r.operation_id for r in view.due(db_now - timedelta(hours=2), 10)} == past
    assert len(view.due(db_now, 1)) == 1
