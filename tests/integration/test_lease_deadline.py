"""A call past its total deadline stops having its lease renewed (issue 14 item 6): a hung
adapter cannot hold an operation, recovery takes it over by its delivery mode."""

from __future__ import annotations

import threading

import pytest

from adapters.fake import FakeAdapter
from executors.flights import DEADLINE_GRACE_SECONDS
from executors.leases import LeaseConfig
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.outcomes import Succeeded
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import REQUEST_TIMEOUT_SECONDS, ModesApp

LEASE = 30.0


@pytest.mark.parametrize(("elapsed", "renewed"), [
    (LEASE * 0.7, False),  # under a third of the lease left, and the 0.5 s call is long overdue
    (REQUEST_TIMEOUT_SECONDS + DEADLINE_GRACE_SECONDS - 0.1, True),  # within its deadline (and grace)
], ids=["past-deadline", "within-deadline"])
def test_leases_are_renewed_only_until_the_call_deadline(elapsed: float, renewed: bool, modes_db: Database) -> None:
    clock = FakeClock()
    app = ModesApp(env=modes_db.library_env(create_table=False), clock=clock)
    op_id = app.make("non_idempotent", "https://partner.example/hung")
    release, started = threading.Event(), threading.Event()

    def hung(request: object) -> Succeeded:
        started.set()
        release.wait(10)
        return Succeeded(status_code=200)

    view = open_view(modes_db)
    worker = Worker(app=app, view=view, adapters={"webhook": FakeAdapter(script=hung)}, clock=clock,
                    secrets=EnvironmentSecrets({"test-token": "tok_test_secret_value"}),
                    config=WorkerConfig(worker_id="w", lease_seconds=LEASE),
                    projection=StatusProjection(app=app, view=view))
    try:
        worker.run_once()
        assert started.wait(5)
        expires = app.get_operation(op_id).lease_expires_at
        clock.advance(elapsed)
        # A renewal threshold of the whole lease: every lease in flight is due for renewal.
        worker.leases.config = LeaseConfig(lease_seconds=LEASE, renew_when_remaining=1.0)
        worker.leases.run_once(clock.now())
        after = app.get_operation(op_id).lease_expires_at
        assert (after != expires) is renewed
    finally:
        release.set()
        worker.close()
        view.close()
        app.close()
