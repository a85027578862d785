"""A worker rides out a store outage cycle by cycle (issue 17): the store refuses every write
for a while, with outcomes already in hand; the worker keeps them, retries with backoff, and
records them when the store is back, even when the outage outlasted the lease. Both backends;
the worker runs in this process on a fake clock with inline egress."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
from eventsourcing.persistence import OperationalError, ProgrammingError

import executors.commit
import executors.settlement
from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.outages import is_store_error, is_transient
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import FakeApp

LEASE_SECONDS = 10.0


class Outage:
    """Makes ``app.save`` raise ``error`` while ``down`` is set; with ``reads``, the batch loads
    of operations and entities (``load_aggregates``) raise it too, as they do when a
    connection is terminated."""

    def __init__(self, app: FakeApp, error: Exception, monkeypatch: pytest.MonkeyPatch | None = None) -> None:
        self.down = False
        self.refused = 0
        self._save = app.save
        self._error = error
        app.save = self.save  # type: ignore[method-assign]
        if monkeypatch is not None:
            for module in (executors.commit, executors.settlement):
                monkeypatch.setattr(module, "load_aggregates", self._refusing(module.load_aggregates))

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        return self._refusing(self._save)(*objs, **kwargs)

    def _refusing(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def refusing(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                self.refused += 1
                raise self._error
            return call(*args, **kwargs)

        return refusing


def _worker(app: FakeApp, database: Database, clock: FakeClock) -> tuple[Worker, StatusProjection]:
    view = open_view(database)
    projection = StatusProjection(app=app, view=view)
    worker = Worker(app=app, view=view, adapters={"fake": FakeAdapter()}, clock=clock,
                    config=WorkerConfig(worker_id="outage", lease_seconds=LEASE_SECONDS, inline_egress=True),
                    rng=random.Random(1), projection=projection, on_committed=projection.offer)
    return worker, projection


@pytest.mark.parametrize("reads", [False, True], ids=["writes-refused", "reads-refused-too"])
@pytest.mark.parametrize("outage_seconds", [1.0, LEASE_SECONDS * 3], ids=["short", "longer-than-the-lease"])
def test_outcomes_in_hand_are_recorded_after_the_outage(app: FakeApp, database: Database, clock: FakeClock,
                                                       outage_seconds: float, reads: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # With reads refused too, the outcome pass fails on loading the entities it co-settles,
    # before its commit: the outcomes taken must still be kept (a drain on PostgreSQL whose
    # backends were terminated lost them so, and their operations lapsed into worker_lost).
    ids = [app.make(f"op-{i}") for i in range(10)]
    worker, projection = _worker(app, database, clock)
    stop = threading.Event()
    outage = Outage(app, OperationalError("terminating connection due to administrator command"),
                    monkeypatch if reads else None)
    try:
        projection.run_once()
        worker.claims.run_once(clock.now())  # claimed, AttemptStarted committed, calls queued
        worker.egress.run_once(clock.now())  # the provider answered: ten outcomes in hand
        outage.down = True
        for _ in range(4):
            assert worker._cycle(stop) is None  # refused, kept, retried later; the worker goes on
            clock.advance(outage_seconds / 4)
        assert worker.degraded and outage.refused >= 4
        assert len(worker.egress.in_flight) == 10  # still held (their leases are renewed when possible)
        outage.down = False
        for _ in range(5):
            worker._cycle(stop)
            clock.advance(0.1)
        projection.run_once()
        statuses = {projection.view.get(op_id).status for op_id in ids}
        assert statuses == {"settled"}
        assert all(app.get_operation(op_id).attempts == 1 for op_id in ids)
        assert not worker.degraded
    finally:
        worker.close()
        projection.view.close()


def test_a_permanent_store_error_is_not_retried(app: FakeApp, database: Database, clock: FakeClock,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    app.make("op")
    worker, projection = _worker(app, database, clock)
    Outage(app, ProgrammingError("relation does not exist")).down = True
    # A store that refuses every write refuses the probe writes too (issue 35).
    monkeypatch.setattr(executors.commit, "probe_refused", lambda app: True)
    try:
        projection.run_once()
        with pytest.raises(ProgrammingError):
            for _ in range(3):
                worker._cycle(threading.Event())
    finally:
        worker.close()
        projection.view.close()


@pytest.mark.parametrize(("error", "transient", "from_store"), [
    (OperationalError("server closed the connection unexpectedly"), True, True),
    (ProgrammingError("relation does not exist"), False, True),
    (ValueError("a bug"), False, False),
])
def test_which_errors_are_transient(error: Exception, transient: bool, from_store: bool) -> None:
    assert is_transient(error) is transient
    assert is_store_error(error) is from_store  # one line in the logs, not a traceback


def test_sqlite_busy_is_transient_and_a_missing_table_is_not() -> None:
    import sqlite3

    for message, transient in (("database is locked", True), ("no such table: x", False)):
        try:
            try:
                raise sqlite3.OperationalError(message)
            except sqlite3.OperationalError as cause:
                raise OperationalError(message) from cause
        except OperationalError as exc:
            assert is_transient(exc) is transient
