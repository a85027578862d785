"""Declaration drift (issue 14 item 5): a declaration changed under the same version is refused at
the worker, the operation goes on the attention queue, and only a worker with the recorded
declaration executes it. On both backends."""

from __future__ import annotations

from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.declarations import DeliveryMode
from ledger.operation import Operation
from ledger.status import ExecutionState as E
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import ModesApp, declaration


class DriftedApp(ModesApp):
    """The same application, its declarations changed without bumping their versions."""

    name = "modes"  # the same store tables (they are named after the application)
    integrations = [declaration(mode, request_timeout_seconds=7.0) for mode in DeliveryMode]


def _worker(app: ModesApp, view: object, adapter: FakeAdapter, clock: FakeClock, worker_id: str) -> Worker:
    return Worker(app=app, view=view, adapters={"webhook": adapter}, clock=clock,  # type: ignore[arg-type]
                  secrets=EnvironmentSecrets({"test-token": "tok_test_secret_value"}), config=WorkerConfig(worker_id=worker_id),
                  projection=StatusProjection(app=app, view=view))  # type: ignore[arg-type]


def test_a_changed_declaration_under_the_same_version_is_refused(modes_db: Database) -> None:
    clock = FakeClock()
    env = modes_db.library_env(create_table=False)
    app, drifted = ModesApp(env=env, clock=clock), DriftedApp(env=env, clock=clock)
    op_id = app.make("idempotent", "https://partner.example/drift")
    view = open_view(modes_db)
    wrong, right = FakeAdapter(), FakeAdapter()
    stale = _worker(drifted, view, wrong, clock, "drifted")
    try:
        stale.run_once()
        stale.egress.wait(0.1)
        stale.run_once()
        op = app.get_operation(op_id)
        assert wrong.count == 0, "never executed under other rules"
        assert op.execution is E.PENDING and op.attention == "declaration_mismatch"
        events = [type(e).__name__ for e in app.events.get(op_id)]
        assert events == ["Intended", "DeclarationMismatched"]
        recorded = list(app.events.get(op_id))[-1]
        assert isinstance(recorded, Operation.DeclarationMismatched)
        assert recorded.declared_digest == drifted.registry.get("test.idempotent", 1).digest() != op.integration_digest
        assert [r.operation_id for r in view.attention_of("declaration_mismatch")] == [op_id]
        clock.advance(60)  # past the worker's deferral: it looks again, records nothing new
        stale.run_once()
        assert app.get_operation(op_id).version == op.version and wrong.count == 0
    finally:
        stale.close()
    good = _worker(app, view, right, clock, "right")
    try:
        for _ in range(20):
            good.run_once()
            good.egress.wait(0.05)
            if app.get_operation(op_id).status.value == "settled":
                break
        done = app.get_operation(op_id)
        assert done.status.value == "settled" and right.count == 1 and done.attention is None
        good.run_once()
        assert view.attention_of("declaration_mismatch") == []
    finally:
        good.close()
        view.close()
        app.close()
        drifted.close()


def test_migrate_and_the_drift_report_name_declarations_that_differ_from_recorded_ones(modes_db: Database) -> None:
    from typer.testing import CliRunner

    from adapters.cli.app import app as cli
    from projections.drift import declaration_drift

    app = ModesApp(env=modes_db.library_env(create_table=False), clock=FakeClock())
    try:
        app.make("idempotent", "https://partner.example/a", n=1)
        app.make("idempotent", "https://partner.example/b", n=2)
        app.make("read_only", "https://partner.example/c", n=3)
        assert declaration_drift(app) == []
    finally:
        app.close()
    drifted = DriftedApp(env=modes_db.library_env(create_table=False))
    try:
        drifts = {(d.integration, d.version): d for d in declaration_drift(drifted)}
        assert set(drifts) == {("test.idempotent", 1), ("test.read_only", 1)}
        assert drifts[("test.idempotent", 1)].recorded == {
            next(i for i in ModesApp.integrations if i.name == "test.idempotent").digest(): 2}
        assert drifts[("test.idempotent", 1)].declared == drifted.registry.get("test.idempotent", 1).digest()
    finally:
        drifted.close()
    result = CliRunner().invoke(cli, ["migrate", "--database-url", modes_db.url()],
                                env={"OPLEDGER_APP": "tests.integration.test_declaration_drift:DriftedApp"})
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())  # the console wraps long lines
    assert "warning: declaration test.idempotent v1 is sha256:" in output
    assert "(2 operations): they are not executed under these rules" in output
