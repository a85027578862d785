"""Fixtures shared by integration tests: a store migrated for the fake-adapter test application,
a fake clock, and the application on them (``test_isolation``, ``test_refused_writes``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from ledger.clock import FakeClock
from ledger.config import Database
from projections import open_view
from projections.view import StatusView
from tests.apps import FakeApp
from tests.stores import migrated_store


@pytest.fixture
def fake_db(database: Database) -> Database:
    migrated_store(database, FakeApp)
    return database


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 1, 1, tzinfo=UTC))


@pytest.fixture
def app(fake_db: Database, clock: FakeClock) -> Iterator[FakeApp]:
    app = FakeApp(env=fake_db.library_env(create_table=False), clock=clock)
    yield app
    app.close()


@pytest.fixture
def view(migrated: Database) -> Iterator[StatusView]:
    """The status view of the ``migrated`` store, closed at the end."""
    opened = open_view(migrated)
    yield opened
    opened.close()
