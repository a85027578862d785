"""A real ``opledger serve`` against hostile clients (issue 27 acceptance): 200 MB bodies sent
three at a time to every operator action, chunked or with a Content-Length that lies, with and
without a token; a client trickling its request head or body; an idle connection. Memory stays
bounded (read from ``/proc``), ``/health`` keeps answering, and nothing is recorded.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import httpx
import pytest

from adapters.processes import ServeProcess, spawn_serve
from ledger.config import Database
from ledger.declarations import DeliveryMode
from tests.apps import ModesApp
from tests.process.conftest import worker_env

pytestmark = pytest.mark.process
TOKEN = "hostile-test-token-0123456789"
ACTIONS = ("resolve", "retry-settlement", "cancel", "approve", "deny")
BODY_BYTES = 200 * 1024 * 1024
CHUNK = b"x" * 65536
TIMEOUT_SECONDS = 2.0  # the head and body deadlines this serve is started with


@pytest.fixture
def served(modes_db: Database, database_url: str, tmp_path: Path) -> Iterator[tuple[ServeProcess, UUID, Database]]:
    app = ModesApp(env=modes_db.library_env(create_table=False))
    try:
        op_id = app.make(DeliveryMode.NON_IDEMPOTENT, "http://127.0.0.1:9/never")  # no worker: it stays pending
    finally:
        app.close()
    tokens = {TOKEN: {"principal": "mallory", "roles": ["viewer", "operator", "approver"]}}
    env = worker_env(database_url, app="tests.apps:ModesApp", OPLEDGER_API_TOKENS=json.dumps(tokens),
                     OPLEDGER_HTTP_HEADER_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS),
                     OPLEDGER_HTTP_BODY_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS))
    server = spawn_serve(env, tmp_path / "serve.log", write=True)
    try:
        yield server, op_id, modes_db
    finally:
        server.kill()


def connect(server: ServeProcess) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def status_of(sock: socket.socket) -> int | None:
    """The status code of the first response on ``sock``, or None when the connection ended first."""
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                return None
            data += chunk
    except OSError:
        return None
    return int(data.split(b" ", 2)[1])


def upload(server: ServeProcess, path: str, framing: str, token: str | None) -> int | None:
    """POST a 200 MB body, stopping as soon as the server answers; returns the status."""
    head = [f"POST {path} HTTP/1.1", "Host: opledger", "Content-Type: application/json"]
    if token is not None:
        head.append(f"Authorization: Bearer {token}")
    head.append({"chunked": "Transfer-Encoding: chunked", "declared": f"Content-Length: {BODY_BYTES}",
                 "understated": "Content-Length: 1024"}[framing])
    with connect(server) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        framed = b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if framing == "chunked" else CHUNK
        sent = 0
        while sent < BODY_BYTES and not select.select([sock], [], [], 0)[0]:
            try:
                sock.sendall(framed)
            except OSError:
                break
            sent += len(CHUNK)
        return status_of(sock)


def resident_bytes(server: ServeProcess) -> int:
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class Watch:
    """Polls ``/health`` (1 s timeout) and the server's resident memory until stopped."""

    def __init__(self, server: ServeProcess) -> None:
        self.server, self.stop, self.failures, self.peak = server, threading.Event(), [], 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, resident_bytes(self.server))
            started = time.monotonic()
            try:
                status = httpx.get(self.server.url + "/health", timeout=1).status_code
                if status != 200 or time.monotonic() - started > 1:
                    self.failures.append(f"{status} after {time.monotonic() - started:.2f} s")
            except httpx.HTTPError as exc:
                self.failures.append(repr(exc))
            time.sleep(0.1)

    def __enter__(self) -> Watch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def event_count(database: Database, op_id: UUID) -> int:
    app = ModesApp(env=database.library_env(create_table=False, read_only=database.backend == "sqlite"))
    try:
        return len(list(app.events.get(op_id)))
    finally:
        app.close()


@pytest.mark.parametrize("token", [None, TOKEN], ids=["anonymous", "authenticated"])
def test_huge_bodies_to_every_action_leave_memory_and_health_alone(
        served: tuple[ServeProcess, UUID, Database], token: str | None) -> None:
    server, op_id, database = served
    for _ in range(3):  # warm up: the first requests allocate what every request needs
        httpx.get(server.url + "/health", timeout=5)
        httpx.post(f"{server.url}/v1/operations/{op_id}/cancel", json={"reason": 1}, timeout=5,
                   headers={"Authorization": f"Bearer {TOKEN}"})
    before_events = event_count(database, op_id)
    baseline = resident_bytes(server)
    results: dict[tuple[str, str], list[int | None]] = {}
    with Watch(server) as watch:
        for framing in ("chunked", "declared", "understated"):
            threads = []
            for action in ACTIONS:
                answers = results.setdefault((action, framing), [])
                path = f"/v1/operations/{op_id}/{action}"
                for _ in range(3):
                    threads.append(threading.Thread(
                        target=lambda p=path, a=answers, f=framing: a.append(upload(server, p, f, token))))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
    assert not watch.failures, watch.failures[:5]
    assert watch.peak - baseline < 50 * 1024 * 1024, (baseline, watch.peak)
    for (action, framing), answers in results.items():
        if token is None:
            expected = {401}
        elif framing == "understated":  # the body is the 1,024 bytes declared: not JSON, the rest a bad request
            expected = {422}
        else:
            expected = {413}
        assert set(answers) == expected, (action, framing, answers)
    assert event_count(database, op_id) == before_events  # nothing recorded
    assert server.alive()


def test_a_client_trickling_its_head_is_cut_off_while_others_are_served(
        served: tuple[ServeProcess, UUID, Database]) -> None:
    server, _, _ = served
    with connect(server) as slow, connect(server) as idle:
        started = time.monotonic()
        closed_after = None
        for byte in b"GET /health HTTP/1.1\r\nHost: opledger\r\nX-Slow: " + b"a" * 100:
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - started
                break
            if select.select([slow], [], [], 0.5)[0]:  # readable: the server closed it (or answered)
                assert slow.recv(4096) == b""
                closed_after = time.monotonic() - started
                break
            assert httpx.get(server.url + "/health", timeout=1).status_code == 200  # others are served
        assert closed_after is not None and closed_after < TIMEOUT_SECONDS + 1.5, closed_after
        assert select.select([idle], [], [], 1.0)[0] and idle.recv(4096) == b""  # an idle one is closed too


def test_a_body_that_trickles_is_408(served: tuple[ServeProcess, UUID, Database]) -> None:
    server, op_id, database = served
    before = event_count(database, op_id)
    with connect(server) as sock:
        sock.sendall(f"POST /v1/operations/{op_id}/cancel HTTP/1.1\r\nHost: opledger\r\nAuthorization: Bearer {TOKEN}"
                     "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode())
        started = time.monotonic()
        status = None
        while status is None and time.monotonic() - started < TIMEOUT_SECONDS + 3:
            if select.select([sock], [], [], 0.5)[0]:
                status = status_of(sock)
                break
            sock.sendall(b" ")
    assert status == 408 and time.monotonic() - started < TIMEOUT_SECONDS + 1.5
    assert event_count(database, op_id) == before


def test_a_large_head_in_one_piece_is_431_and_the_servers_own_lines_are_json(
        served: tuple[ServeProcess, UUID, Database]) -> None:
    server, _, _ = served
    with connect(server) as sock:  # 50 KiB of headers in one write: h11 alone lets it through
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: opledger\r\nX-Big: " + b"a" * 50 * 1024 + b"\r\n\r\n")
        assert status_of(sock) == 431
    with connect(server) as sock:  # malformed: uvicorn answers it itself, and logs a warning
        sock.sendall(b"GET /health HTTP/1.1\r\nContent-Length: -1\r\n\r\n")
        assert status_of(sock) == 400
    time.sleep(0.3)
    logged = [line for line in server.log_path.read_text().splitlines() if line.strip()]
    assert any("Invalid HTTP request received." in line for line in logged)
    for line in logged:
        json.loads(line)  # every line the server wrote is one JSON object (OPLEDGER_LOG_FORMAT=json)
