"""Timeouts that hold (issue 14 item 6): hostile endpoints against the real webhook adapter, each
attempt ending within its total deadline however the endpoint drips its bytes; and calls stuck
in a provider do not hold up the others on the adapter's one event loop (issue 30), whether
blocking callers make them or a worker starts them on the loop (ADR 0009 step 2)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from uuid import uuid4

import pytest

from adapters.webhook import WebhookAdapter
from ledger.clock import SystemClock
from ledger.config import Database
from ledger.declarations import DeliveryMode
from ledger.egress import EgressRequest
from ledger.outcomes import Ambiguous, Failed, Succeeded
from tests.apps import ModesApp, declaration
from tests.conftest import SECRET
from tests.workers import drive_until, status_of, webhook_worker

TOTAL = 1.5
"""The attempt's total deadline in these tests, seconds."""
SLACK = 0.75
"""What the attempt may take past its deadline (closing, classifying, a loaded machine), seconds."""


def _serve(handler: Callable[[socket.socket], None]) -> Iterator[str]:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def loop() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            threading.Thread(target=_handle, args=(conn,), daemon=True).start()

    def _handle(conn: socket.socket) -> None:
        try:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            # The body too: closing with unread bytes sends a reset, which may reach the client
            # before the answer does (the prompt provider's calls failed so under load).
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                body += chunk
            handler(conn)
        except OSError:
            pass
        finally:
            conn.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(2)
    server.close()


def _drip(conn: socket.socket, data: bytes, every: float = 0.25) -> None:
    for byte in data:
        conn.sendall(bytes([byte]))
        time.sleep(every)


@pytest.fixture
def dripped_headers() -> Iterator[str]:
    yield from _serve(lambda conn: _drip(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))


@pytest.fixture
def dripped_body() -> Iterator[str]:
    def handler(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        _drip(conn, b"x" * 100)
    yield from _serve(handler)


@pytest.fixture
def silent() -> Iterator[str]:
    yield from _serve(lambda conn: time.sleep(8))


@pytest.fixture
def credential_redirect() -> Iterator[str]:
    def handler(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://user:hunter2@127.0.0.1:9/steal\r\n"
                     b"Content-Length: 0\r\n\r\n")
    yield from _serve(handler)


def _request(target: str, mode: DeliveryMode = DeliveryMode.IDEMPOTENT) -> EgressRequest:
    return EgressRequest(operation_id=uuid4(), attempt_id=uuid4(), attempt_number=1, integration="hooks.send",
                         delivery_mode=mode, target=target, payload={"n": 1}, timeout_seconds=TOTAL)


def _timed_send(adapter: WebhookAdapter, request: EgressRequest) -> tuple[object, float]:
    started = time.monotonic()
    outcome = adapter.send(request)
    return outcome, time.monotonic() - started


def test_dripped_headers_cannot_stretch_the_attempt(dripped_headers: str) -> None:
    # Each byte arrives well within the per-read timeout; only the total deadline stops it.
    with WebhookAdapter(secret=SECRET, clock=SystemClock()) as adapter:
        outcome, took = _timed_send(adapter, _request(f"{dripped_headers}/hook"))
    assert took < TOTAL + SLACK, took
    assert isinstance(outcome, Ambiguous) and outcome.reason == "timeout", outcome


def test_a_dripped_body_cannot_stretch_the_attempt(dripped_body: str) -> None:
    with WebhookAdapter(secret=SECRET, clock=SystemClock()) as adapter:
        outcome, took = _timed_send(adapter, _request(f"{dripped_body}/hook"))
    assert took < TOTAL + SLACK, took
    # The status line carried the provider's decision; the cut body is only evidence.
    assert isinstance(outcome, Succeeded) and outcome.excerpt.endswith("…[truncated]"), outcome


def test_a_silent_endpoint_ends_at_the_deadline(silent: str) -> None:
    with WebhookAdapter(secret=SECRET, clock=SystemClock()) as adapter:
        outcome, took = _timed_send(adapter, _request(f"{silent}/hook", DeliveryMode.NON_IDEMPOTENT))
    assert TOTAL - 0.1 <= took < TOTAL + SLACK, took
    assert isinstance(outcome, Ambiguous), outcome


def test_a_redirect_to_a_credential_url_is_not_followed_nor_shown(credential_redirect: str) -> None:
    with WebhookAdapter(secret=SECRET, clock=SystemClock()) as adapter:
        outcome, took = _timed_send(adapter, _request(f"{credential_redirect}/hook"))
    assert took < TOTAL + SLACK
    assert isinstance(outcome, Failed) and outcome.status_code == 307, outcome
    assert "hunter2" not in outcome.detail and "user:***@127.0.0.1:9" in outcome.detail


def test_a_kept_alive_connection_reads_the_next_attempts_deadline(dripped_headers: str) -> None:
    with WebhookAdapter(secret=SECRET, clock=SystemClock()) as adapter:
        for _ in range(2):
            _, took = _timed_send(adapter, _request(f"{dripped_headers}/hook"))
            assert took < TOTAL + SLACK


@pytest.fixture
def prompt() -> Iterator[str]:
    # Connection: close, as the server closes after each answer: a kept connection would be
    # reused after the close and fail as a reset.
    yield from _serve(lambda conn: conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"))


def test_calls_stuck_past_their_deadline_do_not_hold_up_other_calls(silent: str, dripped_headers: str,
                                                                     prompt: str) -> None:
    # Every call of an adapter runs on its one event loop (docs/adr/0009-egress-event-loop.md):
    # calls held by a silent provider and a dripping one must not delay a prompt provider's.
    with WebhookAdapter(secret=SECRET, clock=SystemClock()) as adapter:
        stuck: list[tuple[object, float]] = []
        threads = [threading.Thread(target=lambda t=target: stuck.append(_timed_send(adapter, _request(t))))
                   for target in [f"{silent}/hook"] * 8 + [f"{dripped_headers}/hook"] * 8]
        for thread in threads:
            thread.start()
        time.sleep(0.3)  # the stuck calls are under way
        quick = [_timed_send(adapter, _request(f"{prompt}/hook")) for _ in range(5)]
        assert all(isinstance(outcome, Succeeded) for outcome, _ in quick), quick
        assert max(took for _, took in quick) < 0.5, quick
        assert all(thread.is_alive() for thread in threads)  # still stuck while the others went through
        for thread in threads:
            thread.join(TOTAL + SLACK + 1)
    assert len(stuck) == 16
    assert all(isinstance(outcome, Ambiguous) and took < TOTAL + SLACK for outcome, took in stuck), stuck


STUCK_SECONDS = 3.0
"""The total deadline of the worker's stuck calls, seconds: long enough for the prompt ones to
settle meanwhile on a loaded machine."""


class _StuckApp(ModesApp):
    """The test application; its non-idempotent integration's calls end at ``STUCK_SECONDS``."""

    name = "modes"
    integrations = [declaration(DeliveryMode.NON_IDEMPOTENT, request_timeout_seconds=STUCK_SECONDS)]


def test_a_workers_calls_stuck_past_their_deadline_hold_up_no_other_call(modes_db: Database, silent: str,
                                                                          dripped_headers: str, prompt: str) -> None:
    # ADR 0009 step 2: the worker starts each call on the adapter's event loop, with no thread of
    # its own; calls held by a silent and a dripping provider must delay no other operation.
    app = _StuckApp(env=modes_db.library_env(create_table=False), clock=SystemClock())
    mode = DeliveryMode.NON_IDEMPOTENT
    try:
        with webhook_worker(app, modes_db, worker_id="stuck", token="tok", egress_slots=64) as worker:
            stuck = [app.make(mode, f"{url}/hook", n=i) for i, url in enumerate([silent] * 4 + [dripped_headers] * 4)]
            drive_until(worker, lambda: worker.egress.on_loops == 8, what="the stuck calls under way")
            began = time.monotonic()
            quick = [app.make(mode, f"{prompt}/hook", n=10 + i) for i in range(5)]
            drive_until(worker, lambda: all(status_of(app, op_id) == "settled" for op_id in quick),
                        what="the prompt operations settled")
            assert time.monotonic() - began < STUCK_SECONDS
            assert all(op_id in worker.egress.in_flight for op_id in stuck)  # still stuck meanwhile
            assert worker.egress.threads == 0
            drive_until(worker, lambda: all(status_of(app, op_id) == "ambiguous" for op_id in stuck),
                        timeout_seconds=STUCK_SECONDS + SLACK + 2, what="the stuck calls ended at their deadline")
            assert time.monotonic() - began < STUCK_SECONDS + SLACK + 1
    finally:
        app.close()
