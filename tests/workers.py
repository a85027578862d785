"""An in-process worker on the webhook adapter, for integration tests that send real requests
to a loopback or partner process and wait for the result."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from uuid import UUID

from adapters.webhook import WebhookAdapter
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.application import LedgerApplication
from ledger.clock import SystemClock
from ledger.config import Database
from projections.status import StatusProjection
from projections.views import open_view
from tests.conftest import SECRET


@contextmanager
def webhook_worker(app: LedgerApplication, database: Database, *, worker_id: str, token: str,
                   egress_slots: int = 2) -> Iterator[Worker]:
    """A worker of ``app`` keeping ``database``'s status view, its ``webhook`` adapter signing with
    ``tests.conftest.SECRET``, on the system clock (a partner checks ``webhook-timestamp``
    against its own), a 10 s lease, ``egress_slots`` slots (all of them open to one host) and one
    secret, ``test-token`` = ``token``. The worker, the adapter and the view are closed on leaving
    (the app is not)."""
    clock = SystemClock()
    view = open_view(database)
    adapter = WebhookAdapter(secret=SECRET, clock=clock)
    worker = Worker(app=app, view=view, adapters={"webhook": adapter}, clock=clock,
                    config=WorkerConfig(worker_id=worker_id, lease_seconds=10, egress_slots=egress_slots,
                                        egress_per_host=egress_slots),
                    projection=StatusProjection(app=app, view=view),
                    secrets=EnvironmentSecrets({"test-token": token}))
    try:
        yield worker
    finally:
        worker.close()
        adapter.close()
        view.close()


def run_until_settled(worker: Worker, app: LedgerApplication, op_id: UUID, timeout_seconds: float = 20.0) -> None:
    """Run ``worker`` cycles (20 ms apart) until operation ``op_id`` is settled or
    ``timeout_seconds`` pass; the caller asserts on the operation it then reads."""
    deadline = time.monotonic() + timeout_seconds
    while app.get_operation(op_id).status.value != "settled" and time.monotonic() < deadline:
        worker.run_once()
        time.sleep(0.02)


def drive_until(worker: Worker, done: Callable[[], bool], *, timeout_seconds: float = 20.0, what: str = "") -> None:
    """Run ``worker`` cycles until ``done()``, waiting up to 20 ms between them for a call to
    finish; fails the test when ``timeout_seconds`` pass first."""
    deadline = time.monotonic() + timeout_seconds
    while not done():
        assert time.monotonic() < deadline, f"not reached in {timeout_seconds} s: {what}"
        worker.run_once()
        worker.egress.wait(0.02)


def status_of(app: LedgerApplication, op_id: UUID) -> str:
    """The operation's derived status, as its value (``settled``, ``ambiguous``, ...)."""
    return app.get_operation(op_id).status.value
