"""Run the HTTP server: alone (``opledger serve``) or beside a worker (``opledger worker --serve``).

On SQLite one process owns the store for writing (DESIGN §8). ``serve`` alone opens it
read-only beside a worker process by default (the worker keeps the read models; operator
actions, callbacks and commands answer 409/503), and with ``--write`` it owns the store itself
(no worker may run then) and keeps the status and metrics projections. ``worker --serve`` is the
one process that does everything on the embedded store: the worker owns the store and keeps the
read models, and the server writes callbacks, operator actions and commands through the same
open store. On PostgreSQL every way works; the server follows the metrics projection under its
leadership lease (and, alone, the status projection too).

Source: DESIGN §8; issue 27 item 5.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import structlog
import uvicorn

from adapters.followers import follow_metrics
from adapters.http.app import (
    OPEN_METRICS_WARNING,
    ServeConfig,
    ServeSettings,
    check_bind,
    create_app,
    load_serve_settings,
)
from adapters.http.commands import ReceiptSettings, load_receipt_settings, start_receipt_services
from adapters.http.limits import HttpLimits, load_http_limits
from adapters.http.server import serve_in_thread, server_config
from adapters.runtime import Store, open_store
from executors.secrets import check_environment_secrets
from ledger.config import Settings
from ledger.errors import ConfigurationError
from projections.status import StatusProjection

log = structlog.get_logger("opledger.serve")


@dataclass(frozen=True)
class HttpListener:
    """What the HTTP server needs besides the store, checked before anything opens it.

    Attributes:
        host: the interface to bind.
        port: the TCP port (0: any free one).
        settings: tokens, tenant folding, callback tolerance.
        limits: connection, timeout and header limits.
        receipts: the command receipts' settings.
    """

    host: str
    port: int
    settings: ServeSettings
    limits: HttpLimits
    receipts: ReceiptSettings


def http_listener(*, host: str | None, port: int | None, public: bool) -> HttpListener:
    """Every HTTP setting, refused at start when malformed or unsafe (before a store is opened).

    Args:
        host: ``--host``, or None for ``OPLEDGER_HTTP_HOST`` (default 127.0.0.1).
        port: ``--port``, or None for ``OPLEDGER_HTTP_PORT`` (default 8000).
        public: ``--public``: a non-loopback bind is allowed (also ``OPLEDGER_HTTP_PUBLIC``).

    Returns:
        The checked :class:`HttpListener`; a public bind was logged as a warning.

    Raises:
        ConfigurationError: a malformed setting, a short token or secret, or a non-loopback
            bind without ``public`` (``adapters.http.app.check_bind``).

    Source: issue 27 items 1 and 3.
    """
    settings = load_serve_settings()
    bind = host if host is not None else settings.http_host
    opened = check_bind(bind, public=public or settings.http_public)
    check_environment_secrets(os.environ)
    listener = HttpListener(host=bind, port=port if port is not None else settings.http_port, settings=settings,
                            limits=load_http_limits(), receipts=load_receipt_settings())
    if opened:
        log.warning(OPEN_METRICS_WARNING, host=bind)
    return listener


def run_serve(settings: Settings, listener: HttpListener, *, write: bool) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn's handlers), then stop the followers.

    Args:
        settings: the store and application.
        listener: from :func:`http_listener`.
        write: SQLite only: own the store (no worker process may run meanwhile).

    Raises:
        ConfigurationError: the store is not migrated or belongs to another application; the
            address cannot be bound.
        StoreLockedError: ``write`` on an SQLite store a worker owns.
    """
    postgres = settings.database.backend == "postgres"
    writable = postgres or write
    sock = _bound(listener)
    stop = threading.Event()
    with open_store(settings, write=writable) as store:
        holder = f"serve:{uuid.uuid4().hex[:12]}" if postgres else None
        followers: list[threading.Thread] = []
        if writable:  # alone, this server keeps the read models where it may write them
            status = StatusProjection(app=store.app, view=store.view, holder=holder)
            followers.append(threading.Thread(target=status.run, args=(stop,), name="status-projection", daemon=True))
            followers[-1].start()
            followers.append(follow_metrics(settings.database, store.app, stop, holder=holder))
        config = _http_services(store, listener, stop, writable=writable, followers=followers)
        _log_serving(settings, sock, writable)
        try:
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            stop.set()
            for thread in followers:
                thread.join(timeout=5)


def serve_beside_worker(listener: HttpListener) -> Callable[[Store, threading.Event], list[threading.Thread]]:
    """The HTTP server as a service beside a worker on the worker's open store
    (``adapters.runtime.run_worker(beside=...)``): ``opledger worker --serve``.

    The worker keeps the status projection (and on SQLite the metrics one); on PostgreSQL this
    server follows the metrics projection under its leadership lease, as ``serve`` does. The
    address is bound before the store is opened, so a port in use stops the start at once.

    Args:
        listener: from :func:`http_listener`.

    Returns:
        A function of the open store and the worker's stop event that starts the server and
        the command receipts' services and returns their threads. Setting the stop event ends
        them; a server that stops by itself sets it, so the worker stops too.

    Raises:
        ConfigurationError: the address cannot be bound.

    Source: issue 27 item 5.
    """
    sock = _bound(listener)

    def start(store: Store, stop: threading.Event) -> list[threading.Thread]:
        settings = store.settings
        threads: list[threading.Thread] = []
        if settings.database.backend == "postgres":
            threads.append(follow_metrics(settings.database, store.app, stop, holder=f"serve:{uuid.uuid4().hex[:12]}"))
        config = _http_services(store, listener, stop, writable=True, followers=threads)
        threads.append(serve_in_thread(config, stop, sockets=[sock]))
        _log_serving(settings, sock, True)
        return threads

    return start


def _http_services(store: Store, listener: HttpListener, stop: threading.Event, *, writable: bool,
                   followers: list[threading.Thread]) -> uvicorn.Config:
    """The app over ``store`` and, where it writes, the command receipts' services (their
    threads join ``followers``); returns the server's config."""
    serve = listener.settings
    if not serve.api_tokens:
        log.warning("no OPLEDGER_API_TOKENS configured: every /v1 route and the console answer 401")
    app = create_app(store=store, config=ServeConfig(tokens=serve.api_tokens, top_tenants=serve.metrics_top_tenants,
                                                     writable=writable,
                                                     callback_tolerance_seconds=serve.callback_tolerance_seconds,
                                                     body_timeout_seconds=listener.limits.body_timeout_seconds,
                                                     max_header_bytes=listener.limits.max_header_bytes,
                                                     trace_url_template=serve.trace_url_template))
    if writable:  # keyed commands (issue 15): the runner, owner-lease renewal, recovery, retention
        runner, receipt_threads = start_receipt_services(
            store, listener.receipts, stop, max_clock_skew_seconds=store.settings.max_clock_skew_seconds)
        app.state.receipt_runner = runner
        followers.extend(receipt_threads)
    app.state.command_max_body_bytes = listener.receipts.max_body_bytes
    return server_config(app, host=listener.host, port=listener.port, limits=listener.limits)


def _bound(listener: HttpListener) -> socket.socket:
    """The listening socket, bound now: an address in use is a one-line error, not a traceback
    in a thread (uvicorn would exit its own thread only)."""
    family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
    try:
        sock = socket.create_server((listener.host, listener.port), family=family,
                                    backlog=min(listener.limits.max_connections, 2048))
    except OSError as exc:
        raise ConfigurationError(f"cannot listen on {listener.host}:{listener.port}: {exc.strerror or exc}") from None
    return sock


def _log_serving(settings: Settings, sock: socket.socket, writable: bool) -> None:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    log.info("serving", url=f"http://{shown}:{port}", backend=settings.database.backend, writable=writable)
