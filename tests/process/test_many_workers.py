"""Three worker processes share a PostgreSQL store; one is SIGKILLed twice (PostgreSQL only:
on SQLite one process owns the store, DESIGN §8)."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

from adapters.partner import PartnerProcess
from ledger.config import Database
from ledger.status import ExecutionState, SettlementState, is_quiescent
from projections.views import open_view
from tests.apps import MAX_ATTEMPTS, PatientModesApp
from tests.conftest import wait_until
from tests.process.conftest import worker_env

pytestmark = [pytest.mark.process, pytest.mark.postgres]

OPERATIONS = 1000


@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_three_workers_one_killed_twice(modes_db: Database, database_url: str, partner: PartnerProcess,
                                       workers) -> None:
    httpx.post(f"{partner.url}/_control/faults", json={"path": "/slow", "fault": {"delay": 0.2}}).raise_for_status()
    # On CI's loaded 2 cores a 0.5 s request timeout (ModesApp's) and a 1 s lease, renewed with
    # a third left, made every call ambiguous once: none succeeded, so no effect was left to
    # check. With six busy loops beside it, 908 of 1,000 ended ambiguous with a 1 s lease, about
    # 250 with 3 s (the calls in flight at the two kills). Patient: a 5 s request timeout.
    app = PatientModesApp(env=modes_db.library_env(create_table=False))
    modes = {}
    try:
        for n in range(OPERATIONS):
            mode = "non_idempotent" if n % 2 else "idempotent"
            path = "/slow" if n % 10 == 0 else "/fast"
            modes[str(app.make(mode, f"{partner.url}{path}", n=n))] = mode
    finally:
        app.close()

    env = worker_env(database_url, app="tests.apps:PatientModesApp", lease_seconds=3.0)
    victim, *_ = [workers(env) for _ in range(3)]
    view = open_view(modes_db)
    try:
        for _ in range(2):
            received = len(partner.log.requests())
            wait_until(lambda: len(partner.log.requests()) >= received + 100, timeout=60, what="progress")
            victim.kill()
            victim = workers(env)

        def all_quiescent():
            rows = view.list(limit=OPERATIONS + 10)
            done = [r for r in rows
                    if is_quiescent(ExecutionState(r.execution), SettlementState(r.settlement))]
            return rows if len(rows) == OPERATIONS and len(done) == OPERATIONS else None

        rows = wait_until(all_quiescent, timeout=180, interval=0.5, what="every operation settled or on attention")
    finally:
        view.close()

    statuses = Counter(r.status for r in rows)
    assert set(statuses) <= {"settled", "ambiguous"}, statuses
    assert all(r.attempts <= r.max_attempts <= MAX_ATTEMPTS for r in rows)
    deliveries = Counter(r.idempotency_key for r in partner.log.requests() if r.kind == "delivery")
    for key, mode in modes.items():
        assert deliveries[key] <= MAX_ATTEMPTS
        if mode == "non_idempotent":
            assert deliveries[key] <= 1, f"non-idempotent operation {key} was sent {deliveries[key]} times"
        assert partner.log.applied_count(key) <= 1
    # Every succeeded operation's effect is in the partner's log exactly once.
    succeeded = [r for r in rows if r.execution == "succeeded"]
    assert succeeded and all(partner.log.applied_count(str(r.operation_id)) == 1 for r in succeeded)
