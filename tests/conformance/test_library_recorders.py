"""The eventsourcing library's own recorder test cases, run against opledger's SQLite factory
(it customizes the connection pool: synchronous=FULL and WAL verified on every connection).

The library's modules are imported, not its classes, so pytest does not collect the abstract
bases (DESIGN §11).
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

from eventsourcing.tests import persistence as lib

from ledger.persistence import LedgerSQLiteFactory, _DurableSQLitePool


class _OurSQLite:
    """Mixin: a fresh file store per test, built by ``LedgerSQLiteFactory``."""

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


class TestAggregateRecorder(_OurSQLite, lib.AggregateRecorderTestCase):
    def create_recorder(self):
        return self.factory.aggregate_recorder()


class TestApplicationRecorder(_OurSQLite, lib.ApplicationRecorderTestCase):
    def create_recorder(self):
        return self.factory.application_recorder()


class TestTrackingRecorder(_OurSQLite, lib.TrackingRecorderTestCase):
    def create_recorder(self):
        return self.factory.tracking_recorder()


class TestProcessRecorder(_OurSQLite, lib.ProcessRecorderTestCase):
    def create_recorder(self):
        return self.factory.process_recorder()


class TestNonInterleavingNotificationIDs(_OurSQLite, lib.NonInterleavingNotificationIDsBaseCase):
    insert_num = 200

    def create_recorder(self):
        return self.factory.application_recorder()


def test_every_connection_is_durable(tmp_path: Path) -> None:
    factory = LedgerSQLiteFactory({"SQLITE_DBNAME": f"file:{tmp_path / 's.db'}", "CREATE_TABLE": "y"})
    recorder = factory.application_recorder()
    with factory.datastore.get_connection(commit=False) as conn:
        raw = conn._sqlite_conn
        assert raw.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert recorder.max_notification_id() is None
    factory.close()
