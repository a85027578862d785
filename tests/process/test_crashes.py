"""Process-level tests: real worker processes, a real partner, SIGKILL, SIGTERM, SIGSTOP.

Each runs on SQLite and PostgreSQL unless it needs several workers at once, which only
PostgreSQL allows (on SQLite one process owns the store, DESIGN §8).
"""

from __future__ import annotations

import signal
from uuid import UUID

import httpx
import pytest

from adapters.partner import PartnerProcess
from ledger.config import Database
from ledger.status import ExecutionState
from tests.apps import MAX_ATTEMPTS, ModesApp
from tests.conftest import wait_until
from tests.process.conftest import load_operation, signed_deliveries, worker_env

pytestmark = pytest.mark.process

APP = "tests.apps:ModesApp"


def _fault(partner: PartnerProcess, path: str, **fault: object) -> None:
    httpx.post(f"{partner.url}/_control/faults", json={"path": path, "fault": fault}).raise_for_status()


def _make(db: Database, mode: str, target: str, n: int = 0) -> UUID:
    app = ModesApp(env=db.library_env(create_table=False))
    try:
        return app.make(mode, target, n=n)
    finally:
        app.close()


def _settled_or_attention(db: Database, op_id: UUID):
    op = load_operation(ModesApp, db, op_id)
    return op if (op.status.value in ("settled", "ambiguous", "settlement_blocked")) else None


def test_crash_loop_still_stops_at_the_attempt_budget(modes_db: Database, database_url: str,
                                                      partner: PartnerProcess, workers) -> None:
    _fault(partner, "/slow", delay=30)  # every attempt is still on the wire when its worker dies
    op_id = _make(modes_db, "idempotent", f"{partner.url}/slow")
    env = worker_env(database_url, app=APP, lease_seconds=1.0)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        worker = workers(env)
        wait_until(lambda: len(signed_deliveries(partner.log, op_id)) >= attempt, what=f"attempt {attempt} on the wire")
        worker.kill()
    workers(env)
    op = wait_until(lambda: _settled_or_attention(modes_db, op_id), what="the budget to be exhausted")
    assert op.attempts == MAX_ATTEMPTS
    assert op.execution is ExecutionState.AMBIGUOUS and op.attention == "budget_exhausted"
    assert len(signed_deliveries(partner.log, op_id)) == MAX_ATTEMPTS
    assert partner.log.applied_count(str(op_id)) == 1, "same key every time: the partner applied it once"


def test_sigterm_records_the_outcome_that_arrived_before_exit(modes_db: Database, database_url: str,
                                                             partner: PartnerProcess, workers) -> None:
    _fault(partner, "/slowish", delay=0.3)  # under the 0.5 s client timeout
    op_id = _make(modes_db, "non_idempotent", f"{partner.url}/slowish")
    worker = workers(worker_env(database_url, app=APP, lease_seconds=5.0, OPLEDGER_GRACE_SECONDS="5"))
    wait_until(lambda: signed_deliveries(partner.log, op_id), what="the attempt on the wire")
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(20) == 0
    op = load_operation(ModesApp, modes_db, op_id)
    assert op.execution is ExecutionState.SUCCEEDED, op.failure
    assert len(signed_deliveries(partner.log, op_id)) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("mode", ["non_idempotent", "idempotent"])
def test_slow_attempt_outlives_its_lease(mode: str, modes_db: Database, database_url: str,
                                         partner: PartnerProcess, workers) -> None:
    _fault(partner, "/stall", delay=0.3, times=1)
    op_id = _make(modes_db, mode, f"{partner.url}/stall")
    env = worker_env(database_url, app=APP, lease_seconds=1.0)
    first = workers(env)
    wait_until(lambda: signed_deliveries(partner.log, op_id), what="the first attempt on the wire")
    first.process.send_signal(signal.SIGSTOP)  # a long pause: the lease runs out mid-attempt
    try:
        workers(env)
        op = wait_until(lambda: _settled_or_attention(modes_db, op_id), what="the second worker to decide")
    finally:
        first.process.send_signal(signal.SIGCONT)
    epoch_after_takeover = op.epoch
    wait_until(lambda: "late outcome" in first.log_path.read_text() or "rejected" in first.log_path.read_text(),
               timeout=15, what="the first worker to notice it was fenced")
    op = load_operation(ModesApp, modes_db, op_id)
    assert op.epoch >= epoch_after_takeover and op.status.value in ("settled", "ambiguous")
    deliveries = signed_deliveries(partner.log, op_id)
    if mode == "non_idempotent":
        assert op.execution is ExecutionState.AMBIGUOUS and len(deliveries) == 1, "never sent twice"
    else:
        assert op.execution is ExecutionState.SUCCEEDED
        assert len(deliveries) == 2 and {d.idempotency_key for d in deliveries} == {str(op_id)}
        assert partner.log.applied_count(str(op_id)) == 1
