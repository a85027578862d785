"""The eventsourcing library's own recorder test cases, run against opledger's SQLite factory
(it customizes the connection pool: synchronous=FULL and WAL verified on every connection) and
its PostgreSQL application recorder (it inserts plain arrays instead of a composite array).

The library's modules are imported, not its classes, so pytest does not collect the abstract
bases (DESIGN §11).
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from uuid import uuid4

import psycopg
import pytest
from eventsourcing.persistence import InfrastructureFactory, StoredEvent
from eventsourcing.tests import persistence as lib
from eventsourcing.utils import Environment

from ledger.config import Database
from migrations.drivers.recorders import (
    SMALL_BATCH,
    LedgerPostgresApplicationRecorder,
    LedgerSQLiteFactory,
    _DurableSQLitePool,
)
from tests.conftest import drop_schema, new_postgres_url, require_postgres


class _OurSQLite:
    """Mixin: a fresh file store per test, built by ``LedgerSQLiteFactory``; the recorder
    tested is the one named by the test case's ``recorder_kind``."""

    recorder_kind: str

    def setUp(self) -> None:
        self._threads_before = set(threading.enumerate())
        self._dir = tempfile.TemporaryDirectory()
        self.factory = LedgerSQLiteFactory({
            "SQLITE_DBNAME": f"file:{Path(self._dir.name) / 'store.db'}",
            "CREATE_TABLE": "y",
        })
        assert isinstance(self.factory.datastore.pool, _DurableSQLitePool)
        super().setUp()

    def tearDown(self) -> None:
        super().tearDown()
        # Some library tests signal their reader threads to stop without joining them; closing
        # the connections under a reader still inside SQLite's C code crashes the process.
        for thread in set(threading.enumerate()) - self._threads_before:
            thread.join(timeout=30)
        self.factory.close()
        self._dir.cleanup()

    def create_recorder(self):
        """The factory's recorder of the test case's ``recorder_kind`` (aggregate, application,
        tracking or process)."""
        return getattr(self.factory, f"{self.recorder_kind}_recorder")()


class TestAggregateRecorder(_OurSQLite, lib.AggregateRecorderTestCase):
    recorder_kind = "aggregate"


class TestApplicationRecorder(_OurSQLite, lib.ApplicationRecorderTestCase):
    recorder_kind = "application"


class TestTrackingRecorder(_OurSQLite, lib.TrackingRecorderTestCase):
    recorder_kind = "tracking"


class TestProcessRecorder(_OurSQLite, lib.ProcessRecorderTestCase):
    recorder_kind = "process"


class TestNonInterleavingNotificationIDs(_OurSQLite, lib.NonInterleavingNotificationIDsBaseCase):
    recorder_kind = "application"
    insert_num = 200


def test_every_connection_is_durable(tmp_path: Path) -> None:
    factory = LedgerSQLiteFactory({"SQLITE_DBNAME": f"file:{tmp_path / 's.db'}", "CREATE_TABLE": "y"})
    recorder = factory.application_recorder()
    with factory.datastore.get_connection(commit=False) as conn:
        raw = conn._sqlite_conn
        assert raw.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert recorder.max_notification_id() is None
    factory.close()


class _OurPostgres:
    """Mixin: a fresh schema per test, with ``LedgerPostgresApplicationRecorder`` as
    ``ledger.config`` selects it (the same env as every opledger application)."""

    def setUp(self) -> None:
        require_postgres()
        url, self._schema = new_postgres_url()
        with psycopg.connect(Database.parse(url).conninfo(), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self._schema}"')
        env = Database.parse(url).library_env(create_table=True)
        self.factory = InfrastructureFactory.construct(Environment("", env))
        super().setUp()

    def tearDown(self) -> None:
        super().tearDown()
        self.factory.close()
        drop_schema(self._schema)


@pytest.mark.postgres
class TestPostgresApplicationRecorder(_OurPostgres, lib.ApplicationRecorderTestCase):
    def create_recorder(self):
        recorder = self.factory.application_recorder()
        assert isinstance(recorder, LedgerPostgresApplicationRecorder)
        return recorder


@pytest.mark.postgres
class TestPostgresNonInterleavingNotificationIDs(_OurPostgres, lib.NonInterleavingNotificationIDsBaseCase):
    insert_num = 200

    def create_recorder(self):
        return self.factory.application_recorder()


@pytest.mark.postgres
@pytest.mark.parametrize("size", [1, SMALL_BATCH, SMALL_BATCH + 1])
def test_postgres_batches_either_side_of_the_small_batch_limit(size: int) -> None:
    # Up to SMALL_BATCH events go as one parameter per value, more as four arrays: either way
    # the ids come back in insertion order and every field round-trips.
    require_postgres()
    url, schema = new_postgres_url()
    with psycopg.connect(Database.parse(url).conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    factory = InfrastructureFactory.construct(Environment("", Database.parse(url).library_env(create_table=True)))
    try:
        recorder = factory.application_recorder()
        events = [StoredEvent(originator_id=uuid4(), originator_version=i + 1, topic=f"t{i}", state=bytes([i, 0, 255]))
                  for i in range(size)]
        ids = recorder.insert_events(events)
        assert ids is not None and len(ids) == size and list(ids) == sorted(ids)
        stored = recorder.select_notifications(start=ids[0], limit=size + 1)
        assert [(n.id, n.originator_id, n.originator_version, n.topic, n.state) for n in stored] == [
            (i, e.originator_id, e.originator_version, e.topic, e.state) for i, e in zip(ids, events, strict=True)]
    finally:
        factory.close()
        drop_schema(schema)
