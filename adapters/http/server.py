"""The HTTP server under ``opledger serve`` and ``opledger worker --serve``: uvicorn with limits.

uvicorn's and h11's own settings bound connections (``limit_concurrency``: 503 beyond), idle
keep-alive connections (``timeout_keep_alive``) and a request's line and headers
(``h11_max_incomplete_event_size``: 400 beyond). uvicorn has no deadline for a request's head:
a client sending one header byte a second (slowloris) holds its connection for ever, since each
byte cancels the keep-alive timer. :func:`bounded_h11` adds that deadline to uvicorn's h11
protocol; bodies are bounded by ``adapters.http.guard``.

Source: issue 27 item 1; uvicorn's settings (``--limit-concurrency``, ``--timeout-keep-alive``,
``--h11-max-incomplete-event-size``).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from adapters.http.limits import HttpLimits


def bounded_h11(header_timeout_seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline for each request's line and headers.

    The deadline runs from the connection's opening and from each response's end (an idle
    keep-alive connection is bounded by it too); when it passes before the head is complete,
    the connection is closed without an answer.

    Args:
        header_timeout_seconds: the deadline, seconds.

    Returns:
        A protocol class for ``uvicorn.Config(http=...)``.
    """

    class BoundedH11Protocol(H11Protocol):
        head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_head()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the head is complete
                self._head_arrived()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_arrived()
            super().connection_lost(exc)

        def _await_head(self) -> None:
            self._head_arrived()
            self.head_deadline = self.loop.call_later(header_timeout_seconds, self._head_late)

        def _head_arrived(self) -> None:
            if self.head_deadline is not None:
                self.head_deadline.cancel()
                self.head_deadline = None

        def _head_late(self) -> None:
            self.head_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol


def server_config(app: Any, *, host: str, port: int, limits: HttpLimits) -> uvicorn.Config:
    """The uvicorn config of an opledger HTTP server.

    Args:
        app: the ASGI app (``adapters.http.app.create_app``).
        host: interface to bind, e.g. ``127.0.0.1``.
        port: TCP port (0: any free one).
        limits: connection, timeout and header limits (``adapters.http.limits``).

    Returns:
        A ``uvicorn.Config`` that leaves logging to ``adapters.logs.configure_logging`` (uvicorn's
        warnings become lines of the process's format; its access log stays off).
    """
    return uvicorn.Config(app, host=host, port=port, log_config=None,  # adapters.logs renders its lines
                          http=bounded_h11(limits.header_timeout_seconds),
                          limit_concurrency=limits.max_connections, timeout_keep_alive=limits.keep_alive_seconds,
                          h11_max_incomplete_event_size=limits.max_header_bytes)


def serve_in_thread(config: uvicorn.Config, stop: threading.Event, *,
                    sockets: list[socket.socket] | None = None) -> threading.Thread:
    """Run a uvicorn server in a daemon thread until ``stop`` is set (no signal handlers: they
    belong to the main thread's owner, e.g. the worker).

    Args:
        config: from :func:`server_config`.
        stop: set to shut the server down (it finishes requests in flight).
        sockets: listening sockets already bound (uvicorn binds ``config``'s address otherwise).

    Returns:
        The started thread; it ends once the server has shut down.
    """
    server = uvicorn.Server(config)

    def exit_when_stopped() -> None:
        stop.wait()
        server.should_exit = True

    def run() -> None:
        threading.Thread(target=exit_when_stopped, name="http-stop", daemon=True).start()
        try:
            server.run(sockets=sockets)
        finally:
            stop.set()  # a server that stopped by itself stops the process's other work too

    thread = threading.Thread(target=run, name="http", daemon=True)
    thread.start()
    return thread
