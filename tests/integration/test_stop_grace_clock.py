"""The grace period on stop is measured on a monotonic clock, never the injected domain clock.

A fake clock (tests, the simulator) or a wall clock stepped back by NTP must not stretch a
worker's stop past its grace period. Source: issue 10 item 2 ("the grace period on stop uses a
monotonic clock, never the domain clock") and item 3 ("a worker always answers SIGTERM within
its grace period").
"""

from __future__ import annotations

import threading
import time

import pytest

from adapters.fake import FakeAdapter
from executors import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.egress import EgressRequest
from ledger.outcomes import Outcome, Succeeded
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import ModesApp

GRACE_SECONDS = 0.5
MARGIN_SECONDS = 2.0
CALL_SECONDS = 20.0


@pytest.mark.parametrize("poll_seconds", [0.05, 10.0])  # an idle wait longer than the grace must not delay it
def test_stop_returns_within_grace_when_the_domain_clock_stands_still(modes_db: Database, poll_seconds: float) -> None:
    clock = FakeClock()  # never advanced: the domain clock stands still
    app = ModesApp(env=modes_db.library_env(create_table=False), clock=clock)
    release, started = threading.Event(), threading.Event()

    def hold(request: EgressRequest) -> Outcome:
        started.set()
        release.wait(CALL_SECONDS)
        return Succeeded(status_code=200)

    view = open_view(modes_db)
    worker = Worker(app=app, view=view, adapters={"webhook": FakeAdapter(script=hold)}, clock=clock,
                    secrets=EnvironmentSecrets({"test-token": "tok_test_secret_value"}),
                    config=WorkerConfig(worker_id="w", lease_seconds=30, poll_interval_seconds=poll_seconds),
                    projection=StatusProjection(app=app, view=view))
    stop = threading.Event()
    runner = threading.Thread(target=worker.run, args=(stop,), kwargs={"grace_seconds": GRACE_SECONDS},
                              daemon=True)
    try:
        app.make("idempotent", "https://partner.example/hold")
        runner.start()
        assert started.wait(10), "the call is on the wire"
        stop.set()
        began = time.monotonic()
        runner.join(GRACE_SECONDS + MARGIN_SECONDS)
        took = time.monotonic() - began
        assert not runner.is_alive(), f"still running {took:.1f} s after stop (grace {GRACE_SECONDS} s)"
    finally:
        release.set()
        runner.join(CALL_SECONDS)
        worker.close()
        view.close()
        app.close()
