"""A worker that cannot serve an operation (a deployment problem) leaves it waiting, unharmed."""

from __future__ import annotations

from adapters.fake import FakeAdapter
from executors.claim import DEFER_SECONDS
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.status import ExecutionState as E
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import ModesApp


def test_a_missing_secret_defers_the_operation_instead_of_failing_it(modes_db: Database) -> None:
    clock = FakeClock()
    app = ModesApp(env=modes_db.library_env(create_table=False), clock=clock)
    op_id = app.make("idempotent", "http://127.0.0.1:9/x")
    view = open_view(modes_db)
    secrets: dict[str, str] = {}

    class Vault:  # reads the dict on every call, so the test can "fix the deployment"
        def resolve(self, name: str) -> str:
            return EnvironmentSecrets(secrets).resolve(name)

    fake = FakeAdapter()
    worker = Worker(app=app, view=view, adapters={"webhook": fake}, clock=clock,
                    config=WorkerConfig(worker_id="w"), projection=StatusProjection(app=app, view=view),
                    secrets=Vault())
    try:
        for _ in range(3):
            worker.run_once()
        op = app.get_operation(op_id)
        assert op.execution is E.PENDING and op.attempts == 0 and op.epoch == 0, "nothing recorded"
        assert fake.count == 0
        secrets["test-token"] = "tok_now_configured"  # the operator fixes the deployment
        clock.advance(DEFER_SECONDS + 1)
        for _ in range(5):
            worker.run_once()
            worker.egress.wait(0.05)
        assert app.get_operation(op_id).status.value == "settled"
        assert fake.count == 1
    finally:
        worker.close()
        view.close()
        app.close()
