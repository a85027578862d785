"""Approvals bound to purpose, fingerprint and expiry (issue 14 item 2), with the worker and the
CLI on both backends."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from typer.testing import CliRunner

from adapters.cli.app import app as cli
from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from executors.secrets import EnvironmentSecrets
from ledger.approvals import ApprovalRequest
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.declarations import DeliveryMode
from ledger.errors import ApprovalRefusedError
from ledger.operation import Operation
from ledger.status import ExecutionState as E
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import ModesApp, declaration

PURPOSE = "refund above 1,000 EUR"
VALID = 60.0


class ApprovalApp(ModesApp):
    """The test application, its idempotent integration requiring a purpose-bound approval."""

    name = "modes"
    integrations = [declaration(DeliveryMode.IDEMPOTENT, requires_approval=True, approval_purpose=PURPOSE,
                                approval_valid_seconds=VALID)]


def allow_self_approval(request: ApprovalRequest) -> str | None:
    """A host policy: anyone with the approver role, themselves included."""
    return None if "approver" in request.roles else "needs the approver role"


@contextmanager
def _working(database: Database, clock: FakeClock) -> Iterator[tuple[ApprovalApp, FakeAdapter, Worker]]:
    """The application, a counting fake adapter and an in-process worker on ``database``."""
    app = ApprovalApp(env=database.library_env(create_table=False), clock=clock)
    view = open_view(database)
    adapter = FakeAdapter()
    worker = Worker(app=app, view=view, adapters={"webhook": adapter}, clock=clock,
                    secrets=EnvironmentSecrets({"test-token": "tok_test_secret_value"}), config=WorkerConfig(worker_id="w"),
                    projection=StatusProjection(app=app, view=view))
    try:
        yield app, adapter, worker
    finally:
        worker.close()
        view.close()
        app.close()


def _drive(worker: Worker, rounds: int = 10) -> None:
    for _ in range(rounds):
        worker.run_once()
        worker.egress.wait(0.02)


def _approve(app: ApprovalApp, op_id: Any, **kwargs: Any) -> None:
    op = app.get_operation(op_id)
    decl = app.registry.get("test.idempotent")
    op.grant_approval(now=app.clock.now(), purpose=decl.approval_purpose, valid_seconds=decl.approval_valid_seconds,
                      **({"principal": "alice", "roles": {"approver"}} | kwargs))
    app.save(op)


def test_an_approval_that_expires_before_egress_is_void(modes_db: Database) -> None:
    clock = FakeClock()
    with _working(modes_db, clock) as (app, adapter, worker):
        op_id = app.make("idempotent", "https://partner.example/refund")
        _approve(app, op_id)
        clock.advance(VALID + 1)  # nobody ran in time: the approval expired before egress
        _drive(worker)
        op = app.get_operation(op_id)
        assert adapter.count == 0 and op.execution is E.PENDING and op.approval == "required"
        assert op.approval_voided == "approval_expired"
        assert [type(e).__name__ for e in app.events.get(op_id)][-1] == "ApprovalVoided"
        # A fresh approval, used in time, lets it go.
        _approve(app, op_id)
        _drive(worker)
        assert adapter.count == 1 and app.get_operation(op_id).execution is E.SUCCEEDED


def test_a_voided_approval_ends_at_the_pending_deadline_saying_so(modes_db: Database) -> None:
    clock = FakeClock()
    with _working(modes_db, clock) as (app, adapter, worker):
        op_id = app.make("idempotent", "https://partner.example/refund")
        _approve(app, op_id)
        clock.advance(VALID + 1)
        _drive(worker, 3)
        clock.advance(300)  # the test declaration's pending deadline
        _drive(worker, 3)
        op = app.get_operation(op_id)
        assert adapter.count == 0 and op.execution is E.FAILED
        names = [type(e).__name__ for e in app.events.get(op_id)]
        assert names[1:4] == ["ApprovalGranted", "ApprovalVoided", "DeadlineExceeded"], names
        assert op.failure is not None and op.approval_voided == "approval_expired"


@contextmanager
def _refund(modes_db: Database, clock: FakeClock) -> Iterator[tuple[ApprovalApp, UUID]]:
    """An ``ApprovalApp`` on ``modes_db`` with ``clock`` (closed on leaving), and the id of one
    idempotent refund it intended, awaiting approval."""
    app = ApprovalApp(env=modes_db.library_env(create_table=False), clock=clock)
    try:
        yield app, app.make("idempotent", "https://partner.example/refund")
    finally:
        app.close()


def test_an_approval_for_another_fingerprint_or_by_the_intender_is_refused(modes_db: Database) -> None:
    with _refund(modes_db, FakeClock()) as (app, op_id):
        with pytest.raises(ApprovalRefusedError, match="names fingerprint 'sha256:other'"):
            _approve(app, op_id, fingerprint="sha256:other")
        # The test application intends as "system"; the default policy refuses its self-approval.
        with pytest.raises(ApprovalRefusedError, match="self-approval"):
            _approve(app, op_id, principal="system")
        with pytest.raises(ApprovalRefusedError, match="does not have the 'approver' role"):
            _approve(app, op_id, roles=set())
        _approve(app, op_id, principal="system", policy=allow_self_approval)  # a host policy allows it
        op = app.get_operation(op_id)
        assert op.approval == "granted" and op.approved_by == "system"
        assert op.approval_fingerprint == op.fingerprint and op.approval_purpose == PURPOSE
        assert op.approval_expires_at == app.get_operation(op_id).approval_expires_at


def test_a_recorded_approval_of_another_fingerprint_never_allows_egress(modes_db: Database) -> None:
    clock = FakeClock()
    with _refund(modes_db, clock) as (app, op_id):
        op = app.get_operation(op_id)
        # As if recorded by a faulty or older tool: the event carries another fingerprint.
        op.trigger_event(Operation.ApprovalGranted, timestamp=clock.now(), principal="alice",
                         fingerprint="sha256:other", purpose=PURPOSE, expires_at=clock.now() + timedelta(hours=1))
        app.save(op)
        op = app.get_operation(op_id)
        with pytest.raises(Exception, match="approval_fingerprint_mismatch"):
            op.claim(now=clock.now(), worker_id="w", lease_seconds=30)
        assert op.void_approval(now=clock.now()) == "approval_fingerprint_mismatch"


def _one_refund(modes_db: Database) -> UUID:
    """Intend one idempotent refund awaiting approval in ``modes_db`` (the app closed again, for a
    test that goes on through the CLI); its operation id."""
    with _refund(modes_db, FakeClock()) as (_, op_id):
        return op_id


def test_the_purpose_shows_in_ops_show_and_the_timeline(modes_db: Database) -> None:
    op_id = _one_refund(modes_db)
    env = {"OPLEDGER_APP": "tests.integration.test_approvals:ApprovalApp"}
    runner = CliRunner()
    url = ["--database-url", modes_db.url()]
    refused = runner.invoke(cli, ["approve", str(op_id), "--principal", "bob", *url], env=env)
    assert refused.exit_code == 1 and "does not have the 'approver' role" in refused.output
    shown = json.loads(runner.invoke(cli, ["ops", "show", str(op_id), "--json", *url], env=env).output)
    assert shown["approval"] == "required"
    assert shown["approval_detail"]["state"] == "required" and shown["approval_detail"]["purpose"] == PURPOSE
    done = runner.invoke(cli, ["approve", str(op_id), "--principal", "bob", "--role", "approver",
                               "--fingerprint", shown["approval_detail"]["fingerprint"], *url], env=env)
    assert done.exit_code == 0, done.output
    shown = json.loads(runner.invoke(cli, ["ops", "show", str(op_id), "--json", *url], env=env).output)
    assert shown["approval_detail"]["approved_by"] == "bob" and shown["approval_detail"]["expires_at"]
    timeline = json.loads(runner.invoke(cli, ["ops", "timeline", str(op_id), "--json", *url], env=env).output)
    granted = [e for e in timeline if e["event"] == "ApprovalGranted"]
    assert granted and granted[0]["details"]["purpose"] == PURPOSE


def test_the_policy_named_in_config_decides(modes_db: Database) -> None:
    """``OPLEDGER_APPROVAL_POLICY`` names the policy (``module:function``): the default refuses the
    intender's own approval, a host policy named there allows it, a name that does not resolve
    is a one-line configuration error and nothing is recorded."""
    op_id = _one_refund(modes_db)
    env = {"OPLEDGER_APP": "tests.integration.test_approvals:ApprovalApp"}
    runner = CliRunner()
    args = ["approve", str(op_id), "--principal", "system", "--role", "approver", "--database-url", modes_db.url()]
    refused = runner.invoke(cli, args, env=env)
    assert refused.exit_code == 1 and "self-approval" in refused.output
    unknown = runner.invoke(cli, args, env={**env, "OPLEDGER_APPROVAL_POLICY": "tests.integration.test_approvals:nope"})
    assert unknown.exit_code == 2 and "approval policy" in unknown.output and "does not resolve" in unknown.output
    policy = {**env, "OPLEDGER_APPROVAL_POLICY": "tests.integration.test_approvals:allow_self_approval"}
    allowed = runner.invoke(cli, args, env=policy)
    assert allowed.exit_code == 0, allowed.output
    shown = json.loads(runner.invoke(cli, ["ops", "show", str(op_id), "--json", "--database-url", modes_db.url()],
                                     env=env).output)
    assert shown["approval_detail"]["approved_by"] == "system" and shown["approval"] == "granted"


class _StalledEgressClock(FakeClock):
    """A fake clock that egress threads read ``lag`` seconds late: as if the worker stalled
    between committing the claim and sending (the lease is longer than the stall)."""

    lag = 0.0

    def now(self) -> Any:
        now = super().now()
        return now if threading.current_thread() is threading.main_thread() else now + timedelta(seconds=self.lag)


def test_an_approval_that_expires_between_the_claim_and_egress_sends_nothing(modes_db: Database) -> None:
    clock = _StalledEgressClock()
    with _working(modes_db, clock) as (app, adapter, worker):
        op_id = app.make("idempotent", "https://partner.example/refund")
        _approve(app, op_id)
        clock.advance(VALID - 5)  # claimed 5 s before the approval expires, sent 10 s later
        clock.lag = 10.0
        _drive(worker, 3)
        op = app.get_operation(op_id)
        assert adapter.count == 0, "sent after the approval expired"
        assert op.attempts == 1 and op.failure is None and op.execution is E.PENDING, op.execution
        clock.lag = 0.0
        clock.advance(10)
        _drive(worker, 3)
        op = app.get_operation(op_id)
        assert adapter.count == 0 and op.approval == "required" and op.approval_voided == "approval_expired"
        _approve(app, op_id)  # a fresh approval, used in time, lets it go
        _drive(worker)
        assert adapter.count == 1 and app.get_operation(op_id).execution is E.SUCCEEDED
