"""Egress concurrency (issue 10 item 7, ADR 0002 "Egress concurrency"): threads are started as
calls need them, and one slow target host cannot take every egress slot. Both backends; the
worker runs in this process on real egress threads, its calls held by an adapter script."""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest

from adapters.fake import FakeAdapter
from executors.egress import EgressConfig, EgressService
from executors.flights import target_host
from executors.runtime import Worker, WorkerConfig
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.egress import EgressRequest
from ledger.outcomes import Outcome, Succeeded
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import FakeApp

SLOW = "https://slow.partner.test/hook"
FAST = "https://fast.partner.test/hook"
WAIT_SECONDS = 10.0


class Held:
    """An adapter script that holds calls to ``SLOW`` until released; others answer at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, request: EgressRequest) -> Outcome:
        with self._lock:
            self.started[request.target or ""] += 1
        if request.target == SLOW:
            assert self.release.wait(WAIT_SECONDS), "the test never released the slow partner"
        return Succeeded()


def _worker(app: FakeApp, database: Database, clock: FakeClock, script: Held, *, slots: int,
            per_host: int) -> tuple[Worker, StatusProjection]:
    view = open_view(database)
    projection = StatusProjection(app=app, view=view)
    worker = Worker(app=app, view=view, adapters={"fake": FakeAdapter(script=script)}, clock=clock,
                    config=WorkerConfig(worker_id="conc", egress_slots=slots, egress_per_host=per_host),
                    rng=random.Random(3), projection=projection, on_committed=projection.offer)
    return worker, projection


def _cycle_until(worker: Worker, done, *, cycles: int = 200) -> None:
    for _ in range(cycles):
        worker.run_once()
        if done():
            return
        worker.egress.wait(0.05)
    raise AssertionError("the condition was not reached")


def test_a_slow_host_takes_at_most_its_share_and_the_others_are_served(app: FakeApp, database: Database,
                                                                       clock: FakeClock) -> None:
    script = Held()
    slow = [app.make(f"slow-{i}", target=SLOW) for i in range(12)]
    fast = [app.make(f"fast-{i}", target=FAST) for i in range(12)]
    worker, projection = _worker(app, database, clock, script, slots=6, per_host=3)
    try:
        view = worker.claims.view
        # Every fast operation settles while the slow partner holds its three calls.
        _cycle_until(worker, lambda: all(view.get(i) is not None and view.get(i).status == "settled" for i in fast))
        assert script.started[SLOW] == 3, "the slow host got more than its per-host share"
        assert Counter(f.host for f in worker.egress.in_flight.values()) == {target_host(SLOW): 3}
        assert worker.egress.threads <= 6
        script.release.set()
        _cycle_until(worker, lambda: all(view.get(i) is not None and view.get(i).status == "settled" for i in slow))
        assert script.started[SLOW] == 12  # each sent once: none was claimed and left waiting
    finally:
        script.release.set()
        worker.close()
        projection.view.close()


def test_threads_are_started_as_calls_need_them(app: FakeApp, database: Database, clock: FakeClock) -> None:
    script = Held()
    ops = [app.make(f"slow-{i}", target=SLOW) for i in range(5)]
    worker, projection = _worker(app, database, clock, script, slots=64, per_host=64)
    try:
        assert worker.egress.threads == 0  # nothing started before the first call
        _cycle_until(worker, lambda: script.started[SLOW] == 5)
        assert worker.egress.threads == 5  # five calls held at once: five threads, not 64
        script.release.set()
        view = worker.claims.view
        _cycle_until(worker, lambda: all(view.get(i).status == "settled" for i in ops))
        later = [app.make(f"again-{i}", target=FAST) for i in range(20)]
        _cycle_until(worker, lambda: all(view.get(i) is not None and view.get(i).status == "settled" for i in later))
        # A burst of 20 instant calls may add threads while the idle ones wake, never past the
        # calls queued at once, and far from the 64 slots.
        assert 5 <= worker.egress.threads <= 20
    finally:
        script.release.set()
        worker.close()
        projection.view.close()


@pytest.mark.parametrize(("target", "host"), [
    ("https://Partner.Example/a?b=c", "https://partner.example:"),
    ("HTTP://partner.example:8080/x", "http://partner.example:8080"),
    ("https://partner.example:8443/x", "https://partner.example:8443"),
    (None, None),
    ("", None),
    ("https://partner.example:notaport/x", None),
])
def test_target_host(target: str | None, host: str | None) -> None:
    assert target_host(target) == host


def test_free_slots_per_host_never_exceed_the_total() -> None:
    egress = EgressService(clock=FakeClock(), config=EgressConfig(slots=4, per_host=10, inline=True))
    assert egress.free_slots("https://a.test:") == 4
    assert egress.free_slots() == 4
