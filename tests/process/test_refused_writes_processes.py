"""A write the database refuses for one operation is that operation's problem (issue 35): a real
worker process against the reference partner, with a trigger on the events table that refuses
one event type of one operation while other operations are in flight in the same batches (one
answered at once, one whose call is still running). The worker stays alive; every other
operation settles with its real outcome, as the partner's log has it; the refused one is on the
attention queue (``write_refused``) and its provider call was never repeated. SQLite and
PostgreSQL.

Also here: a store-wide refusal (the events table's ``INSERT`` revoked on PostgreSQL, the store
file made read-only on SQLite) still stops the worker with exit 2, and what it had in hand is
not recorded as anything it is not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from uuid import UUID

import httpx
import pytest

from adapters.partner import PartnerProcess
from adapters.processes import WorkerProcess
from ledger.clock import SystemClock
from ledger.config import Database
from ledger.operation import Operation
from tests.apps import PatientModesApp
from tests.conftest import wait_until
from tests.process.conftest import read_only_env, worker_env
from tests.refusals import MESSAGE, refuse_event

pytestmark = pytest.mark.process

APP = "tests.apps:PatientModesApp"
SLOW_SECONDS = 1.5
"""The slow partner path's delay: longer than two thirds of the 1 s lease, so it is renewed."""

# event refused -> (execution, settlement, kind, deliveries of the refused operation, its target path)
CASES = {
    "Claimed": ("pending", "none", "claim", 0, "/ok"),
    "AttemptStarted": ("pending", "none", "claim", 0, "/ok"),
    "Succeeded": ("ambiguous", "none", "outcome", 1, "/ok"),
    "LeaseRenewed": ("succeeded", "pending", "renewal", 1, "/slow"),
    "Settled": ("succeeded", "blocked", "settlement", 1, "/ok"),
    "Cancelled": ("pending", "none", "cancellation", 0, "/ok"),
}


def _app(db: Database, *, write: bool = False) -> PatientModesApp:
    return PatientModesApp(env=db.library_env(create_table=False) if write else read_only_env(db))


def _make(db: Database, specs: list[tuple[str, str]], first: int = 0) -> list[UUID]:
    app = _app(db, write=True)
    try:
        return [app.make(mode, target, n=first + n) for n, (mode, target) in enumerate(specs)]
    finally:
        app.close()


def _states(db: Database, ids: list[UUID]) -> dict[UUID, Operation]:
    app = _app(db)
    try:
        return {op_id: app.get_operation(op_id) for op_id in ids}
    finally:
        app.close()


def _deliveries(partner: PartnerProcess, op_id: UUID) -> list:
    return [r for r in partner.log.requests(str(op_id)) if r.kind == "delivery" and r.signature_valid]


def _done(db: Database, others: list[UUID], bad: UUID, execution: str) -> Callable[[], dict[UUID, Operation] | None]:
    # The refused one is done when its refusal is recorded and its call has ended as expected: a
    # refused renewal is recorded while the slow call is still under way (dispatching).
    def check() -> dict[UUID, Operation] | None:
        ops = _states(db, [*others, bad])
        ready = (ops[bad].write_refused is not None and ops[bad].execution.value == execution
                 and all(ops[i].status.value == "settled" for i in others))
        return ops if ready else None

    return check


def _start(workers: Callable[..., WorkerProcess], database_url: str) -> WorkerProcess:
    worker = workers(worker_env(database_url, app=APP, lease_seconds=1.0))
    wait_until(lambda: "worker started" in worker.log_path.read_text(), what="the worker to start")
    return worker


@pytest.mark.parametrize("event", list(CASES))
def test_a_write_refused_for_one_operation_leaves_the_worker_and_the_others_going(
        event: str, modes_db: Database, database_url: str, partner: PartnerProcess, workers) -> None:
    execution, settlement, kind, deliveries, path = CASES[event]
    httpx.post(f"{partner.url}/_control/faults",
               json={"path": "/slow", "fault": {"delay": SLOW_SECONDS}}).raise_for_status()
    # In the same batches: three answered at once, one still running when the others are recorded.
    others = _make(modes_db, [("non_idempotent", f"{partner.url}/ok")] * 3
                   + [("non_idempotent", f"{partner.url}/slow"), ("idempotent", f"{partner.url}/ok")])
    (bad,) = _make(modes_db, [("non_idempotent", f"{partner.url}{path}")], first=10)
    if event == "Cancelled":
        app = _app(modes_db, write=True)
        try:
            op = app.get_operation(bad)
            op.request_cancel(now=SystemClock().now(), principal="alice", reason="not needed")
            app.save(op)
        finally:
            app.close()
    refuse_event(modes_db, "modes", bad, getattr(Operation, event))
    worker = _start(workers, database_url)
    ops = wait_until(_done(modes_db, others, bad, execution), timeout=60,
                     what=f"the others to settle and the refused one to be {execution}, {event} refused")
    op = ops[bad]
    assert (op.execution.value, op.settlement.value, op.write_refused) == (execution, settlement, kind)
    assert MESSAGE in (op.write_refused_error or "") and op.attention == "write_refused"
    for op_id in others:  # every other operation with its real outcome, as the partner saw it
        assert ops[op_id].execution.value == "succeeded" and len(_deliveries(partner, op_id)) == 1
        assert partner.log.applied_count(str(op_id)) == 1
    # The worker goes on: new intents settle (on PostgreSQL: the SQLite worker owns its store),
    # and the refused one is never sent again.
    if modes_db.backend == "postgres":
        later = _make(modes_db, [("non_idempotent", f"{partner.url}/ok")] * 3, first=20)
        try:
            wait_until(lambda: all(o.status.value == "settled" for o in _states(modes_db, later).values()),
                       timeout=60, what="intents made after the refusal to settle")
        except pytest.fail.Exception:  # say where they stood, and what the worker said last
            states = {str(i): o.status.value for i, o in _states(modes_db, later).items()}
            pytest.fail(f"later intents {states}; worker alive {worker.alive()}; its log ends: "
                        f"{worker.log_path.read_text()[-3000:]}")
    else:
        time.sleep(1.0)  # a second of idle cycles (20 at the 0.05 s poll interval) with it in the store
    assert worker.alive(), worker.log_path.read_text()[-3000:]
    assert len(_deliveries(partner, bad)) == deliveries, "the refused operation was sent again"
    log = worker.log_path.read_text()
    assert "worker stopped" not in log and "Traceback" not in log
    assert _states(modes_db, [bad])[bad].write_refused == kind


def test_a_store_wide_refusal_still_stops_the_worker(modes_db: Database, database_url: str,
                                                     partner: PartnerProcess, workers) -> None:
    httpx.post(f"{partner.url}/_control/faults",
               json={"path": "/slow", "fault": {"delay": SLOW_SECONDS}}).raise_for_status()
    ids = _make(modes_db, [("non_idempotent", f"{partner.url}/slow")] * 3)
    with _store_wide_refusal(modes_db, database_url) as (worker_url, refuse):
        worker = _start(workers, worker_url)
        # Every call is in flight (its attempt recorded) when the store stops taking writes.
        wait_until(lambda: all(_deliveries(partner, i) for i in ids), timeout=20, what="the calls to reach the partner")
        refuse()
        assert worker.process.wait(60) == 2, worker.log_path.read_text()[-3000:]
    log = worker.log_path.read_text()
    assert "the store refused it for good" in log and "WriteRefused" not in log
    ops = _states(modes_db, ids)
    # What it had in hand was not recorded as anything it is not: still dispatching, no refusal
    # noted; recovery decides these by their delivery mode once the store takes writes again.
    assert {(o.execution.value, o.write_refused) for o in ops.values()} == {("dispatching", None)}
    assert all(len(_deliveries(partner, op_id)) == 1 for op_id in ids)


@contextmanager
def _store_wide_refusal(db: Database, database_url: str) -> Iterator[tuple[str, Callable[[], None]]]:
    """The URL a worker should use, and a function that makes the store refuse every insert into
    the events table: on PostgreSQL ``REVOKE INSERT`` from the worker's own role (the test's
    user is a superuser, whom no privilege binds), on SQLite (no privileges; the tests run as
    root, whom file modes do not bind) a trigger refusing every insert."""
    if db.backend == "sqlite":
        yield database_url, lambda: _refuse_all_sqlite(db)
        return
    import psycopg

    role, table = f"{db.schema}_worker", f'"{db.schema}"."modes_events"'
    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f'GRANT USAGE ON SCHEMA "{db.schema}" TO {role}')
        conn.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA "{db.schema}" TO {role}')
        conn.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA "{db.schema}" TO {role}')
        conn.execute(f'GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA "{db.schema}" TO {role}')

    def refuse() -> None:
        with psycopg.connect(db.conninfo(), autocommit=True) as conn:
            conn.execute(f"REVOKE INSERT ON {table} FROM {role}")

    try:
        yield database_url.replace("://root@", f"://{role}@", 1), refuse
    finally:
        with psycopg.connect(db.conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def _refuse_all_sqlite(db: Database) -> None:
    import sqlite3

    assert db.path is not None
    conn = sqlite3.connect(db.path)
    try:
        with conn:
            conn.execute("CREATE TRIGGER refuse_all BEFORE INSERT ON stored_events "
                         "BEGIN SELECT RAISE(ABORT, 'the store takes no writes'); END")
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_drain_with_one_percent_of_ledger_inserts_refused(modes_db: Database, database_url: str,
                                                           partner: PartnerProcess, workers) -> None:
    """Fault injection: a trigger refuses a random 1 % of ledger inserts while two workers drain
    1,000 operations (half of them non-idempotent)."""
    from projections.views import open_view
    from tests.refusals import refusals_made, refuse_at_random

    n = 1000
    specs = [("idempotent" if i % 2 else "non_idempotent", f"{partner.url}/ok") for i in range(n)]
    ids = _make(modes_db, specs)
    refuse_at_random(modes_db, "modes", 1.0)
    env = {**worker_env(database_url, app=APP, lease_seconds=5.0), "OPLEDGER_EGRESS_PER_HOST": "16"}
    started = [workers(env), workers(env)]
    view = open_view(modes_db)
    try:
        def drained() -> bool:
            counts = view.counts()
            return counts.get("settled", 0) + len(view.attention(n)) >= n

        wait_until(drained, timeout=240, interval=0.5, what="the drain to finish")
    finally:
        view.close()
    assert [w.alive() for w in started] == [True, True], "a worker exited"
    ops = _states(modes_db, ids)
    refused = {op_id for op_id, op in ops.items() if op.write_refused is not None}
    unsettled = {op_id: (op.status.value, op.attention) for op_id, op in ops.items()
                 if op.status.value != "settled" and op_id not in refused}
    assert unsettled == {}, "an operation without a refused write did not settle"
    assert all(ops[op_id].attention == "write_refused" for op_id in refused)
    for op_id, (mode, _) in zip(ids, specs, strict=True):
        if mode == "non_idempotent":
            assert partner.log.received_count(str(op_id)) <= 1, f"non-idempotent {op_id} was sent twice"
        else:
            assert {d.idempotency_key for d in _deliveries(partner, op_id)} <= {str(op_id)}
    for worker in started:
        log = worker.log_path.read_text()
        assert "worker stopped" not in log and "Traceback" not in log, log[-3000:]
    # Most refused rows were in batches with other operations' rows, or retried alone and taken
    # (a refusal at random rarely repeats): only what was refused alone is an operation's.
    made = refusals_made(modes_db)
    assert made > 0, "the trigger refused nothing"
    assert len(refused) <= made


@pytest.mark.parametrize(("event", "execution"), [("RemoteStatusObserved", "accepted"), ("Succeeded", "ambiguous")])
def test_a_poll_result_refused_for_one_operation_leaves_the_worker_and_the_others_going(
        event: str, execution: str, database: Database, database_url: str, partner: PartnerProcess,
        workers) -> None:
    from tests.lro_apps import LroApp
    from tests.stores import migrated_store

    migrated_store(database, LroApp)
    app = LroApp(env=database.library_env(create_table=False))
    try:
        others = [app.make(f"{partner.url}/lro/provision?polls=2", n=n) for n in range(3)]
        bad = app.make(f"{partner.url}/lro/provision?polls=2", n=9)
    finally:
        app.close()
    refuse_event(database, "lros", bad, getattr(Operation, event))
    worker = workers(worker_env(database_url, app="tests.lro_apps:LroApp", lease_seconds=1.0))

    def states() -> dict[UUID, Operation]:
        reader = LroApp(env=read_only_env(database))
        try:
            return {op_id: reader.get_operation(op_id) for op_id in [*others, bad]}
        finally:
            reader.close()

    ops = wait_until(lambda: (s := states())[bad].write_refused is not None
                     and all(s[i].status.value == "settled" for i in others) and s, timeout=60,
                     what=f"the others to settle, the poll's {event} refused")
    op = ops[bad]
    assert (op.execution.value, op.write_refused, op.attention) == (execution, "poll", "write_refused")
    assert all(ops[i].execution.value == "succeeded" and partner.log.applied_count(str(i)) == 1 for i in others)
    polls = [r for r in partner.log.requests(str(bad)) if r.kind == "poll"]
    time.sleep(1.0)  # twenty idle cycles: it is not polled or sent again
    assert [r for r in partner.log.requests(str(bad)) if r.kind == "poll"] == polls
    assert len([r for r in partner.log.requests(str(bad)) if r.kind == "delivery"]) == 1
    assert worker.alive() and "worker stopped" not in worker.log_path.read_text()
