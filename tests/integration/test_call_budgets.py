"""Call budgets before egress (issue 14 item 1), one process on both backends: no window gives
out more calls than declared, the rest wait (``BudgetWaited``) and all settle."""

from __future__ import annotations

from collections import Counter
from typing import Any

from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.budgets import window_bounds
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.declarations import DeliveryMode
from ledger.operation import Operation
from projections.status import StatusProjection
from projections.view import open_view
from tests.apps import ModesApp, declaration

LIMIT, WINDOW = 2, 10.0


class BudgetApp(ModesApp):
    """The test application, its idempotent integration allowing 2 calls per 10 s."""

    name = "modes"
    integrations = [declaration(DeliveryMode.IDEMPOTENT,
                                budgets={"calls_per_window": LIMIT, "window_seconds": WINDOW})]


def _worker(app: ModesApp, view: Any, adapter: FakeAdapter, clock: FakeClock, worker_id: str) -> Worker:
    return Worker(app=app, view=view, adapters={"webhook": adapter}, clock=clock,
                  secrets=EnvironmentSecrets({"test-token": "tok"}), config=WorkerConfig(worker_id=worker_id),
                  projection=StatusProjection(app=app, view=view))


def test_no_window_gives_out_more_calls_than_declared(modes_db: Database) -> None:
    clock = FakeClock()
    env = modes_db.library_env(create_table=False)
    app, other = BudgetApp(env=env, clock=clock), BudgetApp(env=env, clock=clock)
    ids = [app.make("idempotent", "https://partner.example/pay", n=i) for i in range(7)]
    view = open_view(modes_db)
    adapter = FakeAdapter()
    sent_at: list[Any] = []

    def record(request: Any) -> Any:
        sent_at.append(clock.now())
        from ledger.outcomes import Succeeded
        return Succeeded(status_code=200)

    adapter = FakeAdapter(script=record)
    workers = [_worker(app, view, adapter, clock, "a"), _worker(other, view, adapter, clock, "b")]
    try:
        for _ in range(12):  # 12 windows' worth of time, two workers taking turns
            for _ in range(4):
                for worker in workers:
                    worker.run_once()
                    worker.egress.wait(0.02)
            clock.advance(WINDOW / 2)
        per_window = Counter(window_bounds(at, WINDOW)[0] for at in sent_at)
        assert len(sent_at) == len(ids) and max(per_window.values()) <= LIMIT, per_window
        assert all(app.get_operation(i).status.value == "settled" for i in ids)
        waited = [e for i in ids for e in app.events.get(i) if isinstance(e, Operation.BudgetWaited)]
        assert waited and all(w.scope == "test.idempotent" for w in waited)
    finally:
        for worker in workers:
            worker.close()
        view.close()
        app.close()
        other.close()
