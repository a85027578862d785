"""Run ``opledger serve``: open the store, keep the read models where this process may, serve HTTP.

On SQLite one process owns the store for writing (DESIGN §8): by default ``serve`` opens it
read-only beside a worker (the worker keeps the read models; operator actions answer 409), and
with ``--write`` it owns the store itself (no worker may run then) and keeps the status and
metrics projections. On PostgreSQL it always writes, and follows both projections under their
leadership leases (a worker that leads keeps them; ``serve`` takes over when none runs).
"""

from __future__ import annotations

import threading
import uuid

import structlog
import uvicorn

from adapters.followers import follow_metrics
from adapters.http.app import ServeConfig, ServeSettings, create_app
from adapters.http.commands import load_receipt_settings, start_receipt_services
from adapters.runtime import open_store
from ledger.config import Settings
from projections.status import StatusProjection

log = structlog.get_logger("opledger.serve")


def run_serve(settings: Settings, serve_settings: ServeSettings, *, host: str, port: int, write: bool) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn's handlers), then stop the followers.

    Args:
        settings: the store and application.
        serve_settings: tokens and tenant folding.
        host: interface to bind, e.g. ``127.0.0.1``.
        port: TCP port (0: any free one).
        write: SQLite only: own the store (operator actions; no worker may run).

    Raises:
        ConfigurationError: the store is not migrated or belongs to another application.
        StoreLockedError: ``write`` on an SQLite store a worker owns.
    """
    postgres = settings.database.backend == "postgres"
    writable = postgres or write
    if not serve_settings.api_tokens:
        log.warning("no OPLEDGER_API_TOKENS configured: every /v1 route and the console answer 401")
    receipt_settings = load_receipt_settings()  # a malformed setting stops serve before it opens the store
    stop = threading.Event()
    with open_store(settings, write=writable) as store:
        followers: list[threading.Thread] = []
        if writable:
            holder = f"serve:{uuid.uuid4().hex[:12]}" if postgres else None
            status = StatusProjection(app=store.app, view=store.view, holder=holder)
            followers.append(threading.Thread(target=status.run, args=(stop,), name="status-projection", daemon=True))
            followers[-1].start()
            followers.append(follow_metrics(settings.database, store.app, stop, holder=holder))
        app = create_app(store=store, config=ServeConfig(tokens=serve_settings.api_tokens,
                                                         top_tenants=serve_settings.metrics_top_tenants,
                                                         writable=writable,
                                                         callback_tolerance_seconds=serve_settings.callback_tolerance_seconds))
        if writable:  # keyed commands (issue 15): the runner, owner-lease renewal, recovery, retention
            runner, receipt_threads = start_receipt_services(
                store, receipt_settings, stop, max_clock_skew_seconds=settings.max_clock_skew_seconds)
            app.state.receipt_runner = runner
            followers.extend(receipt_threads)
        app.state.command_max_body_bytes = receipt_settings.max_body_bytes
        log.info("serving", url=f"http://{host}:{port}", backend=settings.database.backend, writable=writable)
        try:
            uvicorn.run(app, host=host, port=port, log_level="warning")
        finally:
            stop.set()
            for thread in followers:
                thread.join(timeout=5)
