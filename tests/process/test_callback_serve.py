"""Callbacks through real ``opledger serve`` processes on PostgreSQL (issue 12 acceptance).

- ``callback`` delivery mode end to end: a worker sends (with ``X-Callback-Url``), the reference
  partner accepts (202) and calls back signed, ``serve`` records the outcome, the worker settles;
- ``serve`` SIGKILLed while a callback is in flight (before, and after, its commit): the
  partner's retry is accepted once;
- two ``serve`` processes receiving the same callback concurrently: recorded once.

PostgreSQL only: on SQLite one process owns the store for writing, so a worker and a writing
``serve`` cannot run at once (docs/guide.md, "Callbacks").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from uuid import UUID, uuid4

import httpx
import pytest

from adapters.partner import start_partner_process
from adapters.partner.callbacks import callback_body, signed_headers
from adapters.processes import ServeProcess, WorkerProcess, free_port, spawn_serve
from ledger.clock import SystemClock
from ledger.config import Database
from ledger.declarations import DeliveryMode
from tests.apps import ModesApp
from tests.callback_desk import CALLBACK_SECRET, all_delivered
from tests.conftest import SECRET, wait_until
from tests.process.conftest import spawning, worker_env

pytestmark = pytest.mark.postgres
APP = "tests.apps:ModesApp"


@pytest.fixture
def pg_url(database_url: str) -> str:
    if not database_url.startswith("postgresql"):
        pytest.skip("a worker and a writing serve at once need PostgreSQL")
    return database_url


@pytest.fixture
def serves(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    yield from spawning(spawn_serve, tmp_path, "serve")


def serve_env(database_url: str, **extra: str) -> dict[str, str]:
    return worker_env(database_url, app=APP, OPLEDGER_SECRET_CALLBACK_TEST_CALLBACK=CALLBACK_SECRET, **extra)


def history(db: Database, ids: list[UUID]) -> dict[UUID, list[str]]:
    app = ModesApp(env=db.library_env(create_table=False))
    try:
        return {op_id: [type(e).__name__ for e in app.events.get(op_id)] for op_id in ids}
    finally:
        app.close()


def all_settled(db: Database, ids: list[UUID]) -> Callable[[], bool]:
    return lambda: all(names[-1] == "Settled" for names in history(db, ids).values())


def make_callback_ops(db: Database, target: str, count: int) -> list[UUID]:
    app = ModesApp(env=db.library_env(create_table=False))
    try:
        return [app.make(DeliveryMode.CALLBACK, target, n=n) for n in range(count)]
    finally:
        app.close()


def test_callback_mode_end_to_end(modes_db: Database, pg_url: str, tmp_path: Path,
                                  workers: Callable[..., WorkerProcess],
                                  serves: Callable[..., ServeProcess]) -> None:
    served = serves(serve_env(pg_url))
    with start_partner_process(log_path=tmp_path / "partner.db", secret=SECRET,
                               callback_secret=CALLBACK_SECRET) as partner:
        ids = make_callback_ops(modes_db, partner.url + "/provision", 5)
        workers(worker_env(pg_url, app=APP, OPLEDGER_CALLBACK_BASE_URL=served.url))
        wait_until(all_settled(modes_db, ids), timeout=60, what="every callback operation settled")
        wait_until(all_delivered(partner.log), timeout=60, what="the partner saw every callback delivered")
        for op_id, names in history(modes_db, ids).items():
            assert names.count("Accepted") == 1 and names.count("CallbackReceived") == 1, names
            assert partner.log.applied_count(op_id) == 1
        assert {status for _, _, status in partner.log.callback_sends()} == {200}


@pytest.mark.parametrize("failpoint", ["callback:before", "callback:after"])
def test_serve_killed_mid_callback_accepts_the_providers_retry_once(
        modes_db: Database, pg_url: str, tmp_path: Path, failpoint: str,
        workers: Callable[..., WorkerProcess], serves: Callable[..., ServeProcess]) -> None:
    port = free_port()
    doomed = serves(serve_env(pg_url, OPLEDGER_FAILPOINT=failpoint), port=port)
    with start_partner_process(log_path=tmp_path / "partner.db", secret=SECRET,
                               callback_secret=CALLBACK_SECRET) as partner:
        ids = make_callback_ops(modes_db, partner.url + "/provision", 3)
        workers(worker_env(pg_url, app=APP, OPLEDGER_CALLBACK_BASE_URL=doomed.url))
        wait_until(lambda: not doomed.alive(), timeout=60, what="serve to die at its failpoint")
        serves(serve_env(pg_url), port=port)  # restarted where the provider calls back
        wait_until(all_settled(modes_db, ids), timeout=60, what="every callback operation settled")
        # The provider's retry may come after the operation settled (serve died after committing):
        # counted once it was answered.
        wait_until(all_delivered(partner.log), timeout=60, what="the partner saw every callback delivered")
        for names in history(modes_db, ids).values():
            assert names.count("CallbackReceived") == 1 and names.count("Settled") == 1, names
        sends = partner.log.callback_sends()
        assert any(status is None for _, _, status in sends), "no callback was in flight when serve died"


def test_two_serves_receiving_the_same_callback_record_it_once(
        modes_db: Database, pg_url: str, serves: Callable[..., ServeProcess]) -> None:
    first, second = serves(serve_env(pg_url)), serves(serve_env(pg_url))
    app = ModesApp(env=modes_db.library_env(create_table=False), clock=SystemClock())
    attempts: dict[UUID, UUID] = {}
    try:
        for n in range(12):
            op_id = app.make(DeliveryMode.CALLBACK, "http://provider.invalid/hook", n=n)
            op = app.get_operation(op_id)
            now = app.clock.now()
            epoch = op.claim(now=now, worker_id="w", lease_seconds=30)
            attempts[op_id] = uuid4()
            op.start_attempt(epoch=epoch, now=now, attempt_id=attempts[op_id], request_fingerprint="r")
            op.accept(epoch=epoch, now=now, attempt_id=attempts[op_id], remote_id="r")
            app.save(op)
    finally:
        app.close()
    results: dict[UUID, list[str]] = {op_id: [] for op_id in attempts}

    def deliver(server: ServeProcess, op_id: UUID, body: bytes, headers: dict[str, str],
                gate: threading.Barrier) -> None:
        gate.wait()
        response = httpx.post(server.url + "/callbacks/test.callback", content=body, headers=headers, timeout=10)
        results[op_id].append(f"{response.status_code}:{response.json().get('result', '')}")

    for op_id, attempt in attempts.items():
        body = callback_body(operation_id=str(op_id), attempt_id=str(attempt))
        # Two signings of one message (the provider's retry racing its first try), one to each.
        gate = threading.Barrier(2)
        now = SystemClock().now()
        threads = [threading.Thread(target=deliver, args=(server, op_id, body, signed_headers(
            CALLBACK_SECRET, callback_id=f"msg_{op_id}", at=now - timedelta(seconds=lag), body=body), gate))
            for server, lag in ((first, 0), (second, 1))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for op_id, names in history(modes_db, list(attempts)).items():
        assert names.count("CallbackReceived") == 1, names
        assert sorted(results[op_id]) == ["200:duplicate", "200:recorded"], results[op_id]


def test_a_message_recorded_by_one_serve_is_a_replay_at_another(
        modes_db: Database, pg_url: str, serves: Callable[..., ServeProcess]) -> None:
    first, second = serves(serve_env(pg_url)), serves(serve_env(pg_url))
    app = ModesApp(env=modes_db.library_env(create_table=False), clock=SystemClock())
    try:
        op_id = app.make(DeliveryMode.CALLBACK, "http://provider.invalid/hook")
        op = app.get_operation(op_id)
        now = app.clock.now()
        epoch = op.claim(now=now, worker_id="w", lease_seconds=30)
        attempt = uuid4()
        op.start_attempt(epoch=epoch, now=now, attempt_id=attempt, request_fingerprint="r")
        op.accept(epoch=epoch, now=now, attempt_id=attempt, remote_id="r")
        app.save(op)
        body = callback_body(operation_id=str(op_id), attempt_id=str(attempt), outcome="progress")
        headers = signed_headers(CALLBACK_SECRET, callback_id="msg_captured", at=now, body=body)
        assert httpx.post(first.url + "/callbacks/test.callback", content=body, headers=headers).json()["result"] == \
            "recorded"
        length = app.recorder.max_notification_id()
        replayed = httpx.post(second.url + "/callbacks/test.callback", content=body, headers=headers)
        assert replayed.status_code == 401 and "replayed" in replayed.json()["detail"]
        assert app.recorder.max_notification_id() == length
    finally:
        app.close()
