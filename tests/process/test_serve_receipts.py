"""Keyed commands against real ``opledger serve`` processes (issue 15's acceptance):

- a 201 with ``Location`` and ``ETag``, and a typed refusal, replay byte for byte after a restart;
- 20 concurrent requests with one key across 2 servers on PostgreSQL run the handler once;
- an owner SIGKILLed after ``ReceiptOpened`` and before completion: a successor completes it
  after the lease expires, with no client request; the entity shows one execution.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.processes import WorkerProcess
from ledger.config import Settings
from tests.apps import RUNS_FILE_ENV, Ticket
from tests.conftest import wait_until
from tests.process.conftest import worker_env
from tests.receipt_desk import APP_TOPIC, migrate_commands

pytestmark = pytest.mark.process
TOKENS = json.dumps({"client-token-0123456789": {"principal": "cli", "roles": ["viewer"]}})
AUTH = {"Authorization": "Bearer client-token-0123456789"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., tuple[WorkerProcess, str]]]:
    """Start ``opledger serve`` processes (all killed at the end); returns (process, base URL)."""
    started: list[WorkerProcess] = []

    def start(database_url: str, **extra: str) -> tuple[WorkerProcess, str]:
        port = _free_port()
        env = {**os.environ, **worker_env(database_url, app=APP_TOPIC), "OPLEDGER_API_TOKENS": TOKENS,
               RUNS_FILE_ENV: str(tmp_path / "runs.txt"), **extra}
        log_path = tmp_path / f"serve-{len(started)}.log"
        args = [sys.executable, "-m", "adapters.cli", "serve", "--port", str(port)]
        if database_url.startswith("sqlite"):
            args.append("--write")
        with open(log_path, "ab") as log:
            process = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        running = WorkerProcess(process=process, log_path=log_path)
        started.append(running)
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            assert running.alive(), f"serve exited: {log_path.read_text()[-2000:]}"
            try:
                return httpx.get(f"{base}/health", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(up, timeout=30, what="serve to answer")
        return running, base

    yield start
    for process in started:
        process.kill()


def command(base: str, key: str, body: dict[str, Any], name: str = "make_ticket") -> httpx.Response:
    return httpx.post(f"{base}/v1/commands/{name}", content=json.dumps(body).encode(),
                      headers={**AUTH, "Idempotency-Key": f'"{key}"', "Content-Type": "application/json"}, timeout=30)


def envelope(response: httpx.Response) -> tuple[int, dict[str, str], bytes]:
    """What a replay must repeat: status, every header but the server's own, body."""
    headers = {k: v for k, v in response.headers.items() if k not in ("date", "server", "idempotent-replayed")}
    return response.status_code, headers, response.content


def runs(tmp_path: Path) -> list[str]:
    path = tmp_path / "runs.txt"
    return path.read_text().splitlines() if path.exists() else []


def tickets(database_url: str) -> int:
    from adapters.runtime import open_store

    with open_store(Settings(database_url=database_url, app=APP_TOPIC), write=False) as store:
        return len(store.app.recorder.select_notifications(start=None, limit=1000,
                                                           topics=[f"{Ticket.__module__}:Ticket.Opened"]))


def test_a_created_response_and_a_typed_refusal_replay_exactly_after_a_restart(
        database_url: str, serve: Callable[..., tuple[WorkerProcess, str]], tmp_path: Path) -> None:
    migrate_commands(database_url)
    process, base = serve(database_url)
    created = command(base, "order-1", {"label": "a"})
    assert created.status_code == 201, created.text
    assert created.headers["location"].startswith("/tickets/") and created.headers["etag"] == '"1"'
    refused = command(base, "order-2", {"label": "taken"})
    assert refused.status_code == 409 and refused.json()["code"] == "label_taken"
    process.kill()  # a crash, not a graceful stop: the answers must come from the store alone
    _, base = serve(database_url)
    for first, key, body in ((created, "order-1", {"label": "a"}), (refused, "order-2", {"label": "taken"})):
        replay = command(base, key, body)
        assert envelope(replay) == envelope(first)
        assert replay.headers["idempotent-replayed"] == "true"
    assert refused.json()["retryable"] is False and refused.json()["detail"] == "a ticket with this label exists"
    assert len(runs(tmp_path)) == 2  # each handler ran once; the replays ran nothing
    assert tickets(database_url) == 1


@pytest.mark.postgres
def test_twenty_concurrent_requests_with_one_key_across_two_servers_run_the_handler_once(
        serve: Callable[..., tuple[WorkerProcess, str]], tmp_path: Path) -> None:
    from tests.conftest import drop_schema, new_postgres_url, require_postgres

    require_postgres()
    url, schema = new_postgres_url()
    try:
        migrate_commands(url)
        bases = [serve(url)[1], serve(url)[1]]
        body = {"label": "once", "sleep_seconds": 1.0}
        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(lambda i: command(bases[i % 2], "one-key", body), range(20)))
        statuses = sorted(a.status_code for a in answers)
        assert set(statuses) <= {201, 409}, statuses
        pending = [a for a in answers if a.status_code == 409]
        assert pending, "no request overlapped the first: the test did not exercise concurrency"
        assert all(a.json()["code"] == "idempotency_receipt_pending" and "retry-after" in a.headers for a in pending)
        created = [a for a in answers if a.status_code == 201]
        assert created and len({a.content for a in created}) == 1
        final = command(bases[1], "one-key", body)
        assert final.status_code == 201 and final.headers["idempotent-replayed"] == "true"
        assert final.content == created[0].content
        assert len(runs(tmp_path)) == 1, runs(tmp_path)
        assert tickets(url) == 1
    finally:
        drop_schema(schema)


def test_a_successor_completes_a_killed_owners_command_without_the_client(
        database_url: str, serve: Callable[..., tuple[WorkerProcess, str]], tmp_path: Path) -> None:
    from adapters.runtime import open_store
    from ledger.receipt_runner import ReceiptRunner
    from ledger.receipts import COMPLETED, receipt_id

    migrate_commands(database_url)
    lease = {"OPLEDGER_RECEIPT_LEASE_SECONDS": "2"}
    owner, base = serve(database_url, OPLEDGER_FAILPOINT="receipt_complete:before", **lease)
    with pytest.raises(httpx.TransportError):  # the owner dies mid-request
        command(base, "crash-1", {"label": "survivor"})
    owner.process.wait(10)
    assert not owner.alive()
    assert len(runs(tmp_path)) == 1 and tickets(database_url) == 0  # ReceiptOpened committed, nothing else
    serve(database_url, **lease)  # the successor: no client request from here on
    rid = receipt_id("cli", "make_ticket", "crash-1")

    def receipt() -> Any:
        with open_store(Settings(database_url=database_url, app=APP_TOPIC), write=False) as store:
            return ReceiptRunner(app=store.app, clock=store.app.clock, owner_prefix="test").load(rid)

    wait_until(lambda: receipt().state == COMPLETED, timeout=30, what="the successor to complete the receipt")
    completed = receipt()
    assert completed.epoch == 2 and completed.envelope.status == 201
    assert tickets(database_url) == 1  # one execution committed
    assert len(runs(tmp_path)) == 2  # the killed run (nothing committed) and the successor's
