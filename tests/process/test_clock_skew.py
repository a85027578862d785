"""One clock for leases on PostgreSQL (DESIGN §7; issue 10, item 4, acceptance "clock-skew test").

Two worker processes share the store, one with its own clock 15 s fast and one 15 s slow. They
judge leases by the database's clock, so the fast one cannot take over a live lease, and a dead
lease is reclaimed within its TTL plus one poll interval of the database's clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import httpx
import pytest

from adapters.partner import PartnerProcess
from adapters.processes import WorkerProcess
from ledger.config import Database
from ledger.operation import Operation
from ledger.status import ExecutionState
from tests.conftest import database_now, wait_until
from tests.process.conftest import load_operation, read_only_env, signed_deliveries, worker_env
from tests.process.skewed_worker import SlowCallsApp
from tests.stores import migrated_store

pytestmark = [pytest.mark.process, pytest.mark.postgres,
              pytest.mark.parametrize("database_url", ["postgres"], indirect=True)]

APP = "tests.process.skewed_worker:SlowCallsApp"
SKEW_SECONDS = 15.0
LEASE_SECONDS = 2.0
POLL_SECONDS = 0.2
CALL_SECONDS = 6.0
"""The slow call: three leases long, so the lease is renewed twice while the call is out."""
SCHEDULING_SLACK_SECONDS = 1.0
"""Allowed on top of the poll interval for a worker cycle on a busy two-core test machine; a
worker judging by its own clock would be 30 s late here (15 s fast holder, 15 s slow reclaimer)."""


@pytest.fixture
def store(database: Database) -> Database:
    migrated_store(database, SlowCallsApp)
    return database


@pytest.fixture
def skewed(tmp_path: Path, database_url: str) -> Iterator[Callable[[float], WorkerProcess]]:
    """Start ``tests.process.skewed_worker`` processes whose clocks are off by the given seconds;
    all are killed at the end of the test."""
    started: list[WorkerProcess] = []
    env = {**os.environ, **worker_env(database_url, app=APP, lease_seconds=LEASE_SECONDS,
                                      OPLEDGER_POLL_INTERVAL_SECONDS=str(POLL_SECONDS))}

    def start(offset_seconds: float) -> WorkerProcess:
        log_path = tmp_path / f"worker-{len(started)}{offset_seconds:+.0f}s.log"
        with open(log_path, "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", "tests.process.skewed_worker", str(offset_seconds)],
                                       env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        worker = WorkerProcess(process=process, log_path=log_path)
        started.append(worker)
        wait_until(lambda: not worker.alive() or "worker started" in log_path.read_text(), timeout=30,
                   what=f"the worker {offset_seconds:+} s to start")
        assert worker.alive(), log_path.read_text()
        return worker

    yield start
    for worker in started:
        worker.kill()


def _fault(partner: PartnerProcess, path: str, **fault: object) -> None:
    httpx.post(f"{partner.url}/_control/faults", json={"path": path, "fault": fault}).raise_for_status()


def _make(db: Database, mode: str, target: str, n: int) -> UUID:
    app = SlowCallsApp(env=db.library_env(create_table=False))
    try:
        return app.make(mode, target, n=n)
    finally:
        app.close()


def _timeline(db: Database, op_id: UUID) -> list:
    app = SlowCallsApp(env=read_only_env(db))
    try:
        return list(app.events.get(op_id))
    finally:
        app.close()


def _skew_warnings(worker: WorkerProcess) -> list[float]:
    offsets = []
    for line in worker.log_path.read_text().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("level") == "warning" and "clock is off" in entry.get("event", ""):
                offsets.append(entry["offset_seconds"])
    return offsets


def test_a_fast_worker_cannot_take_over_a_live_lease(store: Database, partner: PartnerProcess, skewed) -> None:
    _fault(partner, "/slow", delay=CALL_SECONDS)
    ops = {mode: _make(store, mode, f"{partner.url}/slow", n) for n, mode in enumerate(("idempotent", "non_idempotent"))}
    slow = skewed(-SKEW_SECONDS)
    wait_until(lambda: all(signed_deliveries(partner.log, op_id) for op_id in ops.values()), what="both calls on the wire")
    on_the_wire = time.monotonic()
    fast = skewed(+SKEW_SECONDS)
    # The fast worker polls while the calls are out, for at least one lease: by its own clock,
    # every lease the slow worker writes expired 30 s ago.
    assert time.monotonic() - on_the_wire < CALL_SECONDS - LEASE_SECONDS, \
        "the fast worker started too late to test anything: make CALL_SECONDS longer"
    wait_until(lambda: all(load_operation(SlowCallsApp, store, op_id).status.value in ("settled", "ambiguous", "settlement_blocked")
                           for op_id in ops.values()), timeout=CALL_SECONDS + 20, what="both operations to end")
    for mode, op_id in ops.items():
        op = load_operation(SlowCallsApp, store, op_id)
        assert op.epoch == 1, f"{mode}: the lease was taken over (epoch {op.epoch}, {op.status.value})"
        assert op.execution is ExecutionState.SUCCEEDED and op.status.value == "settled", (mode, op.failure)
        assert op.ambiguity_reason is None
        assert len(signed_deliveries(partner.log, op_id)) == 1, f"{mode}: sent more than once"
        assert sum(isinstance(e, Operation.LeaseRenewed) for e in _timeline(store, op_id)) >= 2
    # Each says at start that its clock is off (offset = database minus local).
    assert _skew_warnings(slow)[0] == pytest.approx(+SKEW_SECONDS, abs=0.5)
    assert _skew_warnings(fast)[0] == pytest.approx(-SKEW_SECONDS, abs=0.5)


def test_a_dead_lease_is_reclaimed_within_its_ttl_and_one_poll_interval(store: Database, partner: PartnerProcess,
                                                                        skewed) -> None:
    _fault(partner, "/stall", delay=30, times=1)  # the first call outlives its worker; the retry does not
    op_id = _make(store, "idempotent", f"{partner.url}/stall", 0)
    fast = skewed(+SKEW_SECONDS)
    wait_until(lambda: signed_deliveries(partner.log, op_id), what="the call on the wire")
    skewed(-SKEW_SECONDS)  # the slow worker waits, ready, while the fast one holds the lease
    fast.kill()
    killed_at = database_now(store)
    seen_at = wait_until(lambda: load_operation(SlowCallsApp, store, op_id).epoch >= 2 and database_now(store), timeout=20,
                         what="the slow worker to reclaim the operation (judging by its own clock, it would take 30 s more)")
    events = _timeline(store, op_id)
    leases = [e.lease_expires_at for e in events if isinstance(e, (Operation.Claimed, Operation.LeaseRenewed))
              and e.epoch == 1]
    expired_at = max(leases)
    reclaim = next(e for e in events if isinstance(e, Operation.Claimed) and e.epoch == 2)
    # The dead holder wrote its lease in database time, not 15 s ahead of it...
    assert expired_at <= killed_at + timedelta(seconds=LEASE_SECONDS + 0.5)
    # ...the reclaimer stamped the takeover in database time, not 15 s behind it...
    assert seen_at - timedelta(seconds=1) <= reclaim.timestamp <= seen_at + timedelta(seconds=0.1)
    # ...and waited for the lease to expire by the database's clock, then at most one poll.
    assert reclaim.takeover and reclaim.timestamp >= expired_at
    assert (reclaim.timestamp - expired_at).total_seconds() <= POLL_SECONDS + SCHEDULING_SLACK_SECONDS
    assert (reclaim.timestamp - killed_at).total_seconds() <= LEASE_SECONDS + POLL_SECONDS + SCHEDULING_SLACK_SECONDS
    op = wait_until(lambda: (op := load_operation(SlowCallsApp, store, op_id)).status.value == "settled" and op, what="the retry to settle")
    assert op.execution is ExecutionState.SUCCEEDED and op.ambiguity_reason is None
    assert {d.idempotency_key for d in signed_deliveries(partner.log, op_id)} == {str(op_id)}
    assert partner.log.applied_count(str(op_id)) == 1
