"""Loopback partners for adapter tests: a Werkzeug server answering with a test's handler (written
as an ``httpx.Response``), a raw socket server for broken answers, and a port nothing listens on.

A quiet ``http.server`` handler base (:class:`QuietHandler`) serves tests that need a plain
threaded HTTP server of their own. Used by the webhook adapter's unit tests and the adapter conformance suite, which drive the
adapters over real sockets (their transport is an aiohttp event loop, ADR 0009).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from werkzeug.serving import make_server

Handler = Callable[[httpx.Request], httpx.Response]


class QuietHandler(BaseHTTPRequestHandler):
    """A ``http.server`` request handler for a test's own loopback server: logs nothing (the test's
    output stays its own), reads a request's body and answers 200 with one call each."""

    def read_body(self) -> bytes:
        """The request's body (``Content-Length`` bytes; empty without one)."""
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def answer(self, body: bytes, headers: dict[str, str]) -> None:
        """Answer 200 with ``headers`` (name to value) and ``body``; sets ``Content-Length``."""
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], path: str = "/") -> Iterator[str]:
    """Serve ``handler`` on a threaded HTTP server on a free loopback port while the block runs;
    gives the URL of ``path`` there. The server is shut down and closed on leaving."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{path}"
    finally:
        server.shutdown()
        server.server_close()


class Partner:
    """A loopback HTTP server answering with the current test's handler."""

    def __init__(self) -> None:
        self.handler: Handler = lambda r: httpx.Response(200)
        self.server = make_server("127.0.0.1", 0, self.app, threaded=True)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def app(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        query = environ.get("QUERY_STRING", "")
        url = f"http://{environ['HTTP_HOST']}{environ['PATH_INFO']}" + (f"?{query}" if query else "")
        headers = [(key[5:].replace("_", "-").lower(), value) for key, value in environ.items()
                   if key.startswith("HTTP_")]
        headers += [(key.replace("_", "-").lower(), environ[key]) for key in ("CONTENT_TYPE", "CONTENT_LENGTH")
                    if environ.get(key)]
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        response = self.handler(httpx.Request(environ["REQUEST_METHOD"], url, headers=headers, content=body))
        start_response(f"{response.status_code} {response.reason_phrase}",
                       [(k, v) for k, v in response.headers.multi_items() if k.lower() != "transfer-encoding"])
        return response.stream  # type: ignore[return-value]


def raw_server(answer: Callable[[socket.socket], None]) -> str:
    """A one-connection server: reads the request, lets ``answer`` do what it likes with the
    socket, closes. Returns its URL."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            answer(conn)
        server.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}/hook"


def closed_port() -> str:
    """A URL on a loopback port nothing listens on (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/hook"


def reset(conn: socket.socket) -> None:
    """Make the socket's close send a TCP reset (``SO_LINGER`` 0)."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


@contextmanager
def uvicorn_serving(app: Any) -> Iterator[str]:
    """Serve the ASGI ``app`` with uvicorn on a free loopback port, on a thread; yields its base
    URL and stops the server when the block ends."""
    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
