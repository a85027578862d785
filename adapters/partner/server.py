"""The reference partner: a real HTTP server that verifies, dedupes, logs and misbehaves on demand.

Routes:

- ``POST <any path>``: a delivery. The Standard Webhooks signature is verified with the
  ``standardwebhooks`` package (401 and nothing applied when it fails); the effect is applied
  once per ``Idempotency-Key`` and later deliveries get the stored first response.
- ``GET /idempotency/{key}``: 200 with the stored response when applied, else 404 (signed too).
- ``POST /lro/...``, ``GET /lro/operations/{key}``, ``POST /lro/operations/{key}:cancel``: the mock
  long-running-operation provider (AIP-151 shape, signed too): :mod:`.lro`.
- ``POST /_control/faults`` ``{"path": ..., "fault": {...}}``, ``DELETE /_control/faults``
  (``?path=`` for one path), ``GET /_control/health``: the test harness (not signed).
- ``POST /_control/callbacks/forge`` and ``/_control/callbacks/replay`` ``{"key": ...}``: send a
  forged or a replayed callback (:mod:`.callbacks`).

A delivery carrying ``X-Callback-Url`` is accepted (202) and answered later by a signed callback
(:mod:`.callbacks`).

Every request, whatever happens to it, is one row of the durable log (:mod:`.store`), committed
before any byte of the response is written. Faults: :mod:`.faults`.

Source: DESIGN §5 (delivery modes and HTTP classification the partner exercises); Standard
Webhooks specification (verification).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from standardwebhooks.webhooks import Webhook

from adapters.partner import callbacks, lro
from adapters.partner.faults import FAULT_HEADER, ApplyTiming, Fault, FaultBook, FaultError
from adapters.partner.store import PartnerRequest, PartnerStore, StoredResponse
from ledger.clock import Clock, SystemClock

SECRET_ENV = "OPLEDGER_PARTNER_SECRET"
"""Environment variable the secret is read from when ``--secret`` is not given."""
CONTROL_PREFIX = "/_control/"
LOOKUP_PREFIX = "/idempotency/"
MAX_REQUEST_BYTES = 1024 * 1024
WRITE_CHUNK_BYTES = 64 * 1024
POLL_INTERVAL_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class _Incoming:
    received_at: str
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    @property
    def key(self) -> str | None:
        if self.method == "GET" and self.path.startswith(LOOKUP_PREFIX):
            return unquote(self.path[len(LOOKUP_PREFIX):]) or None
        return self.headers.get("idempotency-key") or None

    def entry(self, kind: str, **facts: Any) -> PartnerRequest:
        return PartnerRequest(received_at=self.received_at, kind=kind, method=self.method,
                              path=self.path, idempotency_key=self.key,
                              webhook_id=self.headers.get("webhook-id"),
                              attempt_id=self.headers.get("x-attempt-id"), **facts)


class PartnerServer(ThreadingHTTPServer):
    """The partner's HTTP server; owns the store and the fault book.

    Args:
        address: ``(host, port)``; port 0 picks a free port.
        store: the durable log and effects.
        secret: the Standard Webhooks secret deliveries are verified with.
        clock: the partner's own clock (a remote system's wall clock, UTC), for its log.
        callback_secret: the secret its callbacks are signed with (default: ``secret``).
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024
    """The listen backlog, as production servers keep it (nginx 511, uvicorn 2,048; the kernel
    caps it at ``net.core.somaxconn``). ``socketserver``'s 5 overflowed whenever a worker opened
    its egress connections at once: each dropped SYN cost a 1 s retransmit, and a 2,000-operation
    drain ran at a third of its rate (docs/performance.md, "The partner's listen backlog")."""

    def __init__(self, address: tuple[str, int], *, store: PartnerStore, secret: str,
                 clock: Clock | None = None, callback_secret: str | None = None) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.clock = clock or SystemClock()
        self.store = store
        self.faults = FaultBook()
        self.webhook = Webhook(secret)
        self.callbacks = store.callback_sender(secret=callback_secret or secret, clock=self.clock)
        self._stop_callbacks = threading.Event()
        self._callback_thread = threading.Thread(target=self.callbacks.run, args=(self._stop_callbacks,),
                                                 name="partner-callbacks", daemon=True)
        super().__init__(address, PartnerHandler)

    def start_callbacks(self) -> None:
        """Start sending queued callbacks (``serve`` does; tests of the server alone may not)."""
        self._callback_thread.start()

    @property
    def url(self) -> str:
        """The base URL, ``http://host:port``."""
        host, port = str(self.server_address[0]), self.server_address[1]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up on huge bodies or delays are part of the job, not errors.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def server_close(self) -> None:
        super().server_close()
        self._stop_callbacks.set()
        if self._callback_thread.is_alive():
            self._callback_thread.join(timeout=callbacks.SEND_TIMEOUT_SECONDS + 1)
        self.callbacks.close()
        self.store.close()


class PartnerHandler(BaseHTTPRequestHandler):
    """One connection's requests. See the module docstring for the routes."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, each response waits ~40 ms for
    # the client's delayed ACK.
    disable_nagle_algorithm = True
    server: PartnerServer

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: object) -> None:
        """Silence per-request stderr lines: the durable log is the record."""

    def _handle(self) -> None:
        received_at = self.server.clock.now().isoformat()
        length = self.headers.get("Content-Length", "0")
        if not length.isdigit() or int(length) > MAX_REQUEST_BYTES:
            self.close_connection = True
            incoming = self._incoming(received_at, b"")
            return self._finish(incoming.entry("other"), 413, {"error": "body too large"})
        incoming = self._incoming(received_at, self.rfile.read(int(length)))
        if incoming.path.startswith(CONTROL_PREFIX):
            return self._control(incoming)
        kind = _kind(incoming)
        if not self._signature_valid(incoming):
            entry = incoming.entry(kind, signature_valid=False)
            return self._finish(entry, 401, {"error": "invalid signature"})
        try:
            fault = self.server.faults.choose(path=incoming.path, key=incoming.key,
                                              header=incoming.headers.get(FAULT_HEADER.lower()))
        except FaultError as exc:
            entry = incoming.entry(kind, signature_valid=True)
            return self._finish(entry, 400, {"error": str(exc)})
        if kind == "lookup":
            return self._lookup(incoming, fault)
        if kind in ("poll", "cancel"):
            return self._follow(incoming, kind, fault)
        if kind != "delivery":
            return self._finish(incoming.entry(kind, signature_valid=True), 404, {"error": "not found"})
        if incoming.key is None:
            entry = incoming.entry(kind, signature_valid=True)
            return self._finish(entry, 400, {"error": "Idempotency-Key is required"})
        script = None
        if lro.is_create(incoming.method, incoming.path):
            try:
                script = lro.LroScript.from_query(incoming.query)
            except lro.LroScriptError as exc:
                return self._finish(incoming.entry(kind, signature_valid=True), 400, {"error": str(exc)})
        return self._deliver(incoming, incoming.key, fault, script)

    def _deliver(self, incoming: _Incoming, key: str, fault: Fault, script: lro.LroScript | None = None) -> None:
        stored = self.server.store.stored(key)
        wants_callback = callbacks.CALLBACK_URL_HEADER in incoming.headers
        headers: dict[str, str] = {}
        create_lro = None
        if script is not None:
            status, body, location = lro.created_response(key)
            normal = stored or StoredResponse(status, body)
            headers["Operation-Location"] = location
            now = self.server.clock.now()

            def create_lro(db: Any) -> None:
                lro.create(db, key=key, now=now, script=script)
        else:
            normal = stored or _fresh_response(key, accept=fault.accept or wants_callback)
        wire = fault.wire_status(normal.status)
        timing = fault.timing(wire)
        entry = incoming.entry("delivery", signature_valid=True, fault=fault.describe() or None, status=wire)
        applied = False
        on_apply = create_lro
        if wants_callback:  # queued with the effect, in its transaction: never applied without it
            due = self.server.clock.now().timestamp() + callbacks.FIRST_DELAY_SECONDS

            def on_apply(db: Any) -> None:
                callbacks.queue_callback(db, key=key, headers=incoming.headers, due_at=due)
        # The log row is committed with the effect (or alone) before the delay or the response,
        # so a client timeout, a drop or a kill can never hide an applied effect from the log.
        if timing is ApplyTiming.BEFORE:
            applied, stored = self.server.store.record(entry, apply=normal, payload=incoming.body, on_apply=on_apply)
        time.sleep(fault.delay)
        if timing is ApplyTiming.AFTER:
            applied, stored = self.server.store.record(entry, apply=normal, payload=incoming.body, on_apply=on_apply)
        elif timing is ApplyTiming.NEVER:
            self.server.store.record(entry)
        self._respond(wire, fault, stored or normal, replayed=stored is not None and not applied, headers=headers)

    def _follow(self, incoming: _Incoming, kind: str, fault: Fault) -> None:
        # A poll or cancel of a long-running operation: the state change and its log row commit
        # together, before the (possibly faulted) response.
        name, now = lro.name_of(incoming.path), self.server.clock.now()

        def work(db: Any) -> tuple[PartnerRequest, lro.LroAnswer]:
            answer = (lro.poll if kind == "poll" else lro.cancel)(db, name, now)
            entry = incoming.entry(kind, signature_valid=True, fault=fault.describe() or None,
                                   status=fault.wire_status(answer.status))
            return entry, answer

        answer = self.server.store.transact(work)
        time.sleep(fault.delay)
        headers = {"Retry-After": str(answer.retry_after)} if answer.retry_after is not None else {}
        self._respond(fault.wire_status(answer.status), fault, StoredResponse(answer.status, _json(answer.document)),
                      headers=headers)

    def _lookup(self, incoming: _Incoming, fault: Fault) -> None:
        stored = self.server.store.stored(incoming.key or "")
        normal = (StoredResponse(200, stored.body) if stored
                  else StoredResponse(404, _json({"error": "never received"})))
        wire = fault.wire_status(normal.status)
        self.server.store.record(incoming.entry("lookup", signature_valid=True,
                                                fault=fault.describe() or None, status=wire))
        time.sleep(fault.delay)
        self._respond(wire, fault, normal, stored_status=stored.status if stored else None)

    def _control(self, incoming: _Incoming) -> None:
        entry = incoming.entry("control")
        if incoming.path == CONTROL_PREFIX + "health":
            return self._finish(entry, 200, {"ok": True})
        if incoming.path in (CONTROL_PREFIX + "callbacks/forge", CONTROL_PREFIX + "callbacks/replay"):
            return self._callback_control(entry, incoming)
        if incoming.path != CONTROL_PREFIX + "faults":
            return self._finish(entry, 404, {"error": "not found"})
        if incoming.method == "DELETE":
            path = parse_qs(incoming.query).get("path", [None])[0]
            self.server.faults.clear(path)
            return self._finish(entry, 200, {"cleared": path or "all"})
        try:
            data = json.loads(incoming.body)
            path, fault = data["path"], Fault.from_mapping(data["fault"])
            if not isinstance(path, str) or not path.startswith("/"):
                raise FaultError("path must start with '/'")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return self._finish(entry, 400, {"error": f"bad fault request: {exc}"})
        self.server.faults.set_path(path, fault)
        return self._finish(entry, 200, {"path": path, "fault": fault.describe()})

    def _callback_control(self, entry: PartnerRequest, incoming: _Incoming) -> None:
        try:
            key = json.loads(incoming.body)["key"]
            send = self.server.callbacks.forge if incoming.path.endswith("forge") else self.server.callbacks.replay
            status = send(str(key))
        except (ValueError, KeyError, TypeError) as exc:
            return self._finish(entry, 400, {"error": f"bad callback request: {exc}"})
        return self._finish(entry, 200, {"status": status})

    def _finish(self, entry: PartnerRequest, status: int, document: dict) -> None:
        self.server.store.record(replace(entry, status=status))
        self._respond(status, None, StoredResponse(status, _json(document)))

    def _respond(self, status: int | None, fault: Fault | None, response: StoredResponse, *,
                 replayed: bool = False, stored_status: int | None = None,
                 headers: dict[str, str] | None = None) -> None:
        if status is None:
            self.close_connection = True  # the drop fault: no status line, no bytes
            return
        body = fault.body.render() if fault and fault.body else response.body
        if fault and fault.body is None and status != response.status:
            body = _json({"error": "injected fault", "status": status})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if fault and fault.retry_after is not None:
            self.send_header("Retry-After", fault.retry_after)
        if fault and fault.redirect is not None:
            self.send_header("Location", fault.redirect)
        if replayed:
            self.send_header("Idempotent-Replayed", "true")
        if stored_status is not None:
            self.send_header("X-Partner-Stored-Status", str(stored_status))
        for name, value in (headers or {}).items():
            if not (name == "Retry-After" and fault and fault.retry_after is not None):
                self.send_header(name, value)
        self.end_headers()
        try:
            for start in range(0, len(body), WRITE_CHUNK_BYTES):
                self.wfile.write(body[start:start + WRITE_CHUNK_BYTES])
        except ConnectionError:
            self.close_connection = True  # the client read what it wanted and hung up

    def _incoming(self, received_at: str, body: bytes) -> _Incoming:
        parts = urlsplit(self.path)
        return _Incoming(received_at=received_at, method=self.command, path=parts.path,
                         query=parts.query, headers={k.lower(): v for k, v in self.headers.items()},
                         body=body)

    def _signature_valid(self, incoming: _Incoming) -> bool:
        try:
            self.server.webhook.verify(incoming.body, incoming.headers, json_parse=False)
        except Exception:  # the library raises assorted types (decode, base64, split) for junk
            return False
        return True


def _kind(incoming: _Incoming) -> str:
    followed = lro.kind_of(incoming.method, incoming.path)
    if followed is not None:
        return followed
    if incoming.method == "POST":
        return "delivery"
    if incoming.method == "GET" and incoming.path.startswith(LOOKUP_PREFIX):
        return "lookup"
    return "other"


def _fresh_response(key: str, *, accept: bool) -> StoredResponse:
    if accept:
        return StoredResponse(202, _json({"remote_id": f"rop_{key}", "status": "accepted"}))
    return StoredResponse(200, _json({"status": "applied", "idempotency_key": key}))


def _json(document: dict) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def make_server(host: str, port: int, log_path: str | Path, secret: str,
                callback_secret: str | None = None) -> PartnerServer:
    """Bind the partner (not yet serving).

    Args:
        host: the interface to bind, e.g. ``127.0.0.1``.
        port: the port; 0 picks a free one (read it from ``.url``).
        log_path: the SQLite file of the durable log (created if missing).
        secret: the Standard Webhooks secret (``whsec_...``).
        callback_secret: the secret its callbacks are signed with (default: ``secret``).

    Returns:
        The bound server.

    Raises:
        OSError: the address cannot be bound.
    """
    return PartnerServer((host, port), store=PartnerStore(log_path), secret=secret, callback_secret=callback_secret)


def serve(host: str, port: int, log_path: str | Path, secret: str,
          ready: Callable[[str], None] | None = None, callback_secret: str | None = None) -> None:
    """Run the partner until interrupted (KeyboardInterrupt or SystemExit in this thread).

    Args:
        host: the interface to bind.
        port: the port; 0 picks a free one.
        log_path: the SQLite file of the durable log.
        secret: the Standard Webhooks secret.
        ready: called with the base URL once the socket is listening.
        callback_secret: the secret its callbacks are signed with (default: ``secret``).
    """
    server = make_server(host, port, log_path, secret, callback_secret)
    server.start_callbacks()
    try:
        if ready is not None:
            ready(server.url)
        server.serve_forever(poll_interval=POLL_INTERVAL_SECONDS)
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    """``python -m adapters.partner``: serve, printing the bound URL on one line when ready.

    Args:
        argv: ``--host``, ``--port``, ``--log``, ``--secret`` (default: ``$OPLEDGER_PARTNER_SECRET``).

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(prog="python -m adapters.partner",
                                     description="Run the opledger reference partner server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True, help="SQLite file of the durable request log")
    parser.add_argument("--secret", default=os.environ.get(SECRET_ENV),
                        help=f"Standard Webhooks secret (default: ${SECRET_ENV})")
    parser.add_argument("--callback-secret", default=os.environ.get(callbacks.CALLBACK_SECRET_ENV),
                        help=f"secret its callbacks are signed with (default: ${callbacks.CALLBACK_SECRET_ENV}, "
                             "else --secret)")
    args = parser.parse_args(argv)
    if not args.secret:
        parser.error(f"--secret or ${SECRET_ENV} is required")
    try:
        Webhook(args.secret)
    except Exception:  # the library raises assorted types for a malformed secret
        parser.error("the secret is not a Standard Webhooks secret (whsec_ + base64)")
    # SIGTERM unwinds through serve()'s finally, closing the store cleanly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        serve(args.host, args.port, args.log, args.secret, ready=lambda url: print(url, flush=True),
              callback_secret=args.callback_secret)
    except KeyboardInterrupt:
        pass
    return 0
