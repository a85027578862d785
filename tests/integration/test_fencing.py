"""A slow attempt outlives its lease, in one process on both backends: a second worker reclaims,
and the first worker's late outcome is rejected (the process-level version with SIGSTOP runs on
PostgreSQL in tests/process)."""

from __future__ import annotations

import threading
import time

import pytest

from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.outcomes import Succeeded
from ledger.status import ExecutionState as E
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import ModesApp

LEASE = 10.0


@pytest.mark.parametrize(("mode", "expected", "sends"), [
    ("non_idempotent", E.AMBIGUOUS, 1),
    ("idempotent", E.SUCCEEDED, 2),
])
def test_late_outcome_of_a_stalled_worker_is_rejected(mode: str, expected: E, sends: int, modes_db: Database) -> None:
    clock = FakeClock()
    env = modes_db.library_env(create_table=False)
    app_a, app_b = ModesApp(env=env, clock=clock), ModesApp(env=env, clock=clock)
    op_id = app_a.make(mode, "https://partner.example/slow")
    release = threading.Event()
    started = threading.Event()

    def slow(request):
        started.set()
        release.wait(10)
        return Succeeded(status_code=200)

    slow_adapter, fast_adapter = FakeAdapter(script=slow), FakeAdapter()
    secrets = EnvironmentSecrets({"test-token": "tok_test_secret_value"})
    view = open_view(modes_db)
    a = Worker(app=app_a, view=view, adapters={"webhook": slow_adapter}, clock=clock, secrets=secrets,
               config=WorkerConfig(worker_id="a", lease_seconds=LEASE), projection=StatusProjection(app=app_a, view=view))
    b = Worker(app=app_b, view=view, adapters={"webhook": fast_adapter}, clock=clock, secrets=secrets,
               config=WorkerConfig(worker_id="b", lease_seconds=LEASE), projection=StatusProjection(app=app_b, view=view))
    try:
        a.run_once()
        assert started.wait(5), "worker a's attempt is on the wire"
        clock.advance(LEASE + 1)  # worker a is stalled: no cycle renews its lease
        for _ in range(20):
            b.run_once()
            b.egress.wait(0.02)
            clock.advance(1)
            if app_b.get_operation(op_id).status.value in ("settled", "ambiguous"):
                break
        decided = app_b.get_operation(op_id)
        assert decided.execution is expected and decided.epoch >= 2
        release.set()  # worker a wakes up with its (late) success
        deadline = time.monotonic() + 5
        rejected = 0
        while time.monotonic() < deadline and a.in_flight:
            rejected += a.run_once().rejected
            time.sleep(0.02)
        assert rejected >= 1, "the stale worker's outcome was refused"
        after = app_b.get_operation(op_id)
        assert after.version == decided.version and after.execution is expected
        assert slow_adapter.count + fast_adapter.count == sends
        assert {r.operation_id for r in fast_adapter.requests} <= {op_id}
    finally:
        release.set()
        a.close()
        b.close()
        view.close()
        app_a.close()
        app_b.close()
