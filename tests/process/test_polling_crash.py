"""A worker SIGKILLed mid-poll loses nothing: another worker resumes polling the recorded remote
operation, never sends the create call again, and settles the result once (issue 12 item 2).

On SQLite the second worker starts after the first died (one process owns the store); on
PostgreSQL it runs beside it from the start and takes over when the poll lease lapses.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from adapters.partner import PartnerProcess
from ledger.config import Database
from ledger.status import ExecutionState, SettlementState
from tests.conftest import wait_until
from tests.lro_apps import LroApp
from tests.process.conftest import read_only_env, worker_env
from tests.stores import migrated_store

pytestmark = pytest.mark.process

APP = "tests.lro_apps:LroApp"
POLL_LEASE_SECONDS = "2"


def _load(db: Database, op_id: UUID):
    app = LroApp(env=read_only_env(db))
    try:
        return app.get_operation(op_id), [type(e).__name__ for e in app.events.get(op_id)]
    finally:
        app.close()


def _polls(partner: PartnerProcess, op_id: UUID) -> list:
    return [r for r in partner.log.requests(str(op_id)) if r.kind == "poll" and r.signature_valid]


def test_a_worker_killed_mid_poll_is_resumed_by_another(database: Database, database_url: str,
                                                        partner: PartnerProcess, workers) -> None:
    migrated_store(database, LroApp)
    app = LroApp(env=database.library_env(create_table=False))
    try:
        op_id = app.make(f"{partner.url}/lro/provision?polls=0&after=5")  # done 5 s after creation
    finally:
        app.close()
    env = worker_env(database_url, app=APP, lease_seconds=1.0, OPLEDGER_POLL_LEASE_SECONDS=POLL_LEASE_SECONDS)
    first = workers(env)
    wait_until(lambda: len(_polls(partner, op_id)) >= 3, what="the first worker polling")
    first.kill()  # SIGKILL, mid-poll: its poll lease is left to lapse
    polls_before = len(_polls(partner, op_id))
    workers(env)

    def settled():
        op, events = _load(database, op_id)
        return (op, events) if op.settlement is SettlementState.SETTLED else None

    op, events = wait_until(settled, timeout=40, what="the second worker to finish the operation")
    assert op.execution is ExecutionState.SUCCEEDED and op.remote_id == f"operations/{op_id}"
    assert len(_polls(partner, op_id)) > polls_before, "the second worker polled"
    # Lost 0, duplicate effects 0: one create call, applied once; one attempt; settled once.
    creates = [r for r in partner.log.requests(str(op_id)) if r.kind == "delivery"]
    assert len(creates) == 1 and partner.log.applied_count(str(op_id)) == 1
    assert events.count("AttemptStarted") == 1 and events.count("Settled") == 1
    # The resume was a takeover of the lapsed poll lease under a new epoch.
    assert events.count("Claimed") >= 3 and op.lease_takeovers >= 1
