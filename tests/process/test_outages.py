"""Workers ride out lost database connections (issue 17): a real worker process on PostgreSQL
whose every backend is terminated (``pg_terminate_backend``, as a DBA or a failover would) keeps
running, logs the outage once, and settles what it had and what comes next, with no delivered
call turned into operator work and no non-idempotent call sent twice (checked against the
reference partner's log).

Only this test's worker is touched: it connects under an ``application_name`` of its own
(libpq's ``PGAPPNAME``), and only backends with that name are terminated.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from uuid import UUID

import psycopg
import pytest

from adapters.partner import PartnerProcess
from adapters.processes import WorkerProcess
from ledger.config import Database
from projections.views import open_view
from tests.apps import PatientModesApp
from tests.conftest import PG_URL, wait_until
from tests.process.conftest import worker_env

pytestmark = [pytest.mark.process, pytest.mark.postgres,
              pytest.mark.parametrize("database_url", ["postgres"], indirect=True)]

APP = "tests.apps:PatientModesApp"


def _terminate(tag: str) -> int:
    """Terminate every backend of the worker tagged ``tag``; returns how many."""
    with psycopg.connect(PG_URL.split("?")[0], autocommit=True) as conn:
        row = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE application_name = %s", (tag,)).fetchone()
    return int(row[0]) if row else 0


def _start(workers: Callable[..., WorkerProcess], database_url: str, tag: str) -> WorkerProcess:
    # 16 calls at once: the reference partner commits each request to SQLite before answering,
    # and a few hundred at once push it past even PatientModesApp's 5 s timeout.
    worker = workers({**worker_env(database_url, app=APP, lease_seconds=5.0, OPLEDGER_EGRESS_PER_HOST="16"),
                      "PGAPPNAME": tag})
    wait_until(lambda: "worker started" in worker.log_path.read_text(), what="the worker to start")
    return worker


def _make(db: Database, specs: list[tuple[str, str]]) -> list[UUID]:
    app = PatientModesApp(env=db.library_env(create_table=False))
    try:
        return [app.make(mode, target, n=n) for n, (mode, target) in enumerate(specs)]
    finally:
        app.close()


def _settled(db: Database, expected: int) -> Callable[[], dict[str, int] | None]:
    view = open_view(db)

    def check() -> dict[str, int] | None:
        counts = view.counts()
        return counts if counts.get("settled", 0) + counts.get("ambiguous", 0) >= expected else None

    return check


def _why(db: Database, partner: PartnerProcess | None = None, worker: WorkerProcess | None = None) -> list[str]:
    """The ambiguous operations' last events, for a failure message: with ``partner``, how many
    of each one's requests the partner received; with ``worker``, the worker's log lines that
    name it."""
    app = PatientModesApp(env=db.library_env(create_table=False))
    log = worker.log_path.read_text().splitlines() if worker is not None else []
    try:
        found = []
        for row in open_view(db).attention(20):
            events = list(app.repository.event_store.get(row.operation_id))
            trail = " > ".join(f"{type(e).__name__}({getattr(e, 'reason', '')})" for e in events[-4:])
            if partner is not None:
                trail += f" received={partner.log.received_count(str(row.operation_id))}"
            found.append(trail + "".join(f"\n  {line}" for line in log if str(row.operation_id) in line))
        return found
    finally:
        app.close()


def test_an_idle_worker_loses_every_connection_and_picks_up_new_intents(
        modes_db: Database, database_url: str, partner: PartnerProcess, workers) -> None:
    tag = f"opledger-test-{uuid.uuid4().hex[:8]}"
    worker = _start(workers, database_url, tag)
    assert _terminate(tag) >= 2  # the recorder's pool, the status view's, the projection's
    ids = _make(modes_db, [("idempotent", f"{partner.url}/ok")] * 20)
    counts = wait_until(_settled(modes_db, len(ids)), timeout=15, what="20 intents written after the outage")
    assert counts == {"settled": 20}
    assert worker.alive(), "the worker exited"
    log = worker.log_path.read_text()
    assert log.count("store unreachable") <= 2  # once per outage (the worker's loop, the projection's)
    assert "Traceback" not in log


def test_a_drain_survives_two_terminations_without_ambiguity_or_duplicates(
        modes_db: Database, database_url: str, partner: PartnerProcess, workers) -> None:
    tag = f"opledger-test-{uuid.uuid4().hex[:8]}"
    n = 1000
    specs = [("idempotent" if i % 2 else "non_idempotent", f"{partner.url}/ok") for i in range(n)]
    ids = _make(modes_db, specs)
    worker = _start(workers, database_url, tag)
    view = open_view(modes_db)
    for fraction in (0.2, 0.6):
        wait_until(lambda f=fraction: view.counts().get("settled", 0) >= n * f, timeout=120,
                   what=f"{fraction:.0%} settled")
        assert _terminate(tag) >= 1
    counts = wait_until(_settled(modes_db, n), timeout=180, what="the drain to finish")
    assert counts == {"settled": n}, f"a transient outage turned delivered calls into operator work: {_why(modes_db, partner, worker)}"
    assert worker.alive()
    for op_id, (mode, _) in zip(ids, specs):
        if mode == "non_idempotent":
            assert partner.log.received_count(str(op_id)) == 1, f"non-idempotent {op_id} was sent twice"


def test_a_store_that_cannot_work_stops_the_worker_with_one_clear_line(
        modes_db: Database, database_url: str, workers) -> None:
    tag = f"opledger-test-{uuid.uuid4().hex[:8]}"
    worker = _start(workers, database_url, tag)
    with psycopg.connect(PG_URL.split("?")[0], autocommit=True) as conn:  # a DBA's mistake
        conn.execute(f"DROP TABLE {modes_db.schema}.opledger_operation_status")
    assert worker.process.wait(20) == 2
    log = worker.log_path.read_text()
    assert "worker stopped: the store refused it for good" in log and "opledger_operation_status" in log
    assert "Traceback" not in log, log


def test_new_intents_are_picked_up_by_notification_not_by_the_poll(
        modes_db: Database, database_url: str, partner: PartnerProcess, workers) -> None:
    # A 5 s poll interval: a pickup well under it can only come from LISTEN/NOTIFY, also after
    # the listener's own connection was terminated and came back.
    tag = f"opledger-test-{uuid.uuid4().hex[:8]}"
    env = {**worker_env(database_url, app=APP, lease_seconds=30.0, OPLEDGER_POLL_INTERVAL_SECONDS="5"),
           "PGAPPNAME": tag}
    worker = workers(env)
    wait_until(lambda: "worker started" in worker.log_path.read_text(), what="the worker to start")
    view = open_view(modes_db)
    took = []
    for round_number in range(6):
        if round_number == 3:
            assert _terminate(tag) >= 1
            wait_until(lambda: "listener reconnected" in worker.log_path.read_text(), timeout=10,
                       what="the listener to reconnect")
        began = time.monotonic()
        (op_id,) = _make(modes_db, [("idempotent", f"{partner.url}/ok")])
        wait_until(lambda op_id=op_id: (row := view.get(op_id)) is not None and row.status == "settled",
                   timeout=10, interval=0.01, what="the intent to settle")
        took.append(time.monotonic() - began)
    assert max(took) < 2.5, f"pickup took {took} s: the 5 s poll, not a notification"


def test_a_worker_with_a_tiny_pool_and_many_egress_slots_waits_and_settles_everything(
        database: Database, database_url: str, workers) -> None:
    from tests.apps import FakeApp
    from tests.stores import migrated_store

    migrated_store(database, FakeApp)
    app = FakeApp(env=database.library_env(create_table=False))
    try:
        ids = [app.make(f"op-{i}") for i in range(300)]
    finally:
        app.close()
    # pool_size=1: the recorder's pool holds 1 connection (+1 overflow), the status view's 1;
    # the loop, the projection thread and its catch-up helpers wait for them.
    tiny = f"{database_url}&pool_size=1"
    worker = workers(worker_env(tiny, app="tests.apps:FakeApp", lease_seconds=5.0, OPLEDGER_WORKER_THREADS="50"))
    view = open_view(database)
    counts = wait_until(lambda: (c := view.counts()).get("settled", 0) >= len(ids) and c, timeout=120,
                        what="300 operations to settle through a tiny pool")
    assert counts == {"settled": len(ids)}
    assert worker.alive()
    assert "Traceback" not in worker.log_path.read_text()


def _restart_postgres() -> None:
    """Restart the local PostgreSQL cluster (CI owns its server). The test that calls it is marked
    ``postgres_alone``: no other test of the run uses the server meanwhile (tests/conftest.py)."""
    import subprocess
    from pathlib import Path as _Path

    versions = sorted(p.name for p in _Path("/etc/postgresql").iterdir()) if _Path("/etc/postgresql").exists() else []
    if not versions:
        pytest.fail("no local PostgreSQL cluster to restart (pg_ctlcluster)")
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "restart"], check=True,
                   capture_output=True, timeout=60)


@pytest.mark.postgres_alone
def test_a_postgres_restart_mid_drain_loses_nothing_and_sends_nothing_twice(
        modes_db: Database, database_url: str, partner: PartnerProcess, workers) -> None:
    from projections.status import StatusProjection

    n = 600
    specs = [("idempotent" if i % 2 else "non_idempotent", f"{partner.url}/ok") for i in range(n)]
    ids = _make(modes_db, specs)
    started = [_start(workers, database_url, f"opledger-test-{uuid.uuid4().hex[:8]}") for _ in range(2)]
    view = open_view(modes_db)
    wait_until(lambda: view.counts().get("settled", 0) >= n * 0.3, timeout=120, what="30% settled")
    view.close()
    _restart_postgres()
    view = open_view(modes_db)
    counts = wait_until(_settled(modes_db, n), timeout=180, what="the drain to finish after the restart")
    assert counts == {"settled": n}, f"after a restart: {_why(modes_db)}"
    assert all(worker.alive() for worker in started), "a worker exited on the restart"
    for op_id, (mode, _) in zip(ids, specs):
        if mode == "non_idempotent":
            assert partner.log.received_count(str(op_id)) == 1, f"non-idempotent {op_id} was sent twice"
    for worker in started:  # the rebuild swaps tables under a writer otherwise
        worker.process.terminate()
        assert worker.process.wait(30) == 0
    live = sorted(view.list(limit=n), key=lambda row: row.operation_id)
    app = PatientModesApp(env=modes_db.library_env(create_table=False))
    try:
        StatusProjection(app=app, view=view).rebuild()
    finally:
        app.close()
    assert sorted(view.list(limit=n), key=lambda row: row.operation_id) == live, "the projection drifted"


def test_claims_do_not_wait_for_a_projection_leader_that_was_killed(
        modes_db: Database, database_url: str, partner: PartnerProcess, workers) -> None:
    # The projection's leader dies; its leadership lease holds the projection still for its TTL.
    # The other worker claims a new intent from the log's tail meanwhile (it needs no status row).
    import signal

    started = [_start(workers, database_url, f"opledger-test-{uuid.uuid4().hex[:8]}") for _ in range(2)]
    with psycopg.connect(PG_URL.split("?")[0], autocommit=True) as conn:
        conn.execute(f"SET search_path = {modes_db.schema}")
        holder = wait_until(lambda: conn.execute(
            "SELECT holder FROM opledger_leases WHERE name LIKE 'projection.%'").fetchone(), what="a leader")[0]
    pid = int(holder.split(":")[1])
    leader = next(worker for worker in started if worker.process.pid == pid)
    survivor = next(worker for worker in started if worker is not leader)
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait(10)
    began = time.monotonic()
    (op_id,) = _make(modes_db, [("idempotent", f"{partner.url}/ok")])
    wait_until(lambda: partner.log.received_count(str(op_id)) >= 1, timeout=10, interval=0.01,
               what="the surviving worker to send the new intent")
    took = time.monotonic() - began
    assert took < 1.0, f"the claim waited {took:.2f} s, as for the projection's leadership to change hands"
    assert survivor.alive()


def test_serve_answers_503_while_the_store_is_away_and_recovers(
        modes_db: Database, database_url: str, tmp_path) -> None:
    import os
    import socket
    import subprocess
    import sys

    import httpx

    tag = f"opledger-test-{uuid.uuid4().hex[:8]}"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, **worker_env(database_url, app=APP), "PGAPPNAME": tag}
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "adapters.cli", "serve", "--port", str(port)], env=env,
                                   stdout=log, stderr=log)
    try:
        url = f"http://127.0.0.1:{port}/health"

        def up() -> bool:
            try:
                return httpx.get(url, timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(up, timeout=30, what="serve to answer")
        assert _terminate(tag) >= 1
        answers = []
        for _ in range(20):
            response = httpx.get(url, timeout=5)
            answers.append(response.status_code)
            if response.status_code == 503:
                assert response.headers["retry-after"] and response.headers["content-type"].startswith(
                    "application/problem+json")
            if response.status_code == 200:
                break
        assert set(answers) <= {200, 503} and answers[-1] == 200, answers
        assert process.poll() is None, "serve exited"
        assert "Traceback" not in log_path.read_text()
    finally:
        process.terminate()
        process.wait(10)
