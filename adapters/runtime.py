"""Wiring for long-running processes: open the store, build adapters, run a worker.

This is where the packages meet (DESIGN §2: the CLI wires them together): settings choose the
host application, the backend and the adapters; ``executors`` and ``projections`` stay free of
any adapter import.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog
from eventsourcing.utils import resolve_topic

from executors.runtime import Worker, WorkerConfig
from ledger.application import LedgerApplication
from ledger.clock import Clock, SystemClock
from ledger.config import Settings
from ledger.egress import Adapter
from ledger.errors import ConfigurationError
from ledger.persistence import check_store_identity
from projections.drift import report_declaration_drift
from projections.history import check_readable_history
from projections.status import StatusProjection
from projections.view import StatusView, open_view

log = structlog.get_logger("opledger.runtime")

WORKER_GC_THRESHOLDS = (50_000, 50, 100)
"""Cyclic-GC thresholds of a worker process (CPython's defaults are 700, 10, 10)."""


def tune_gc_for_worker() -> None:
    """Set this process's garbage collector for a long-running worker: the objects alive now
    (modules, classes, the application) move to a permanent generation (``gc.freeze``), and the
    collector runs after 50,000 net allocations instead of 700.

    A worker keeps tens of thousands of long-lived objects (its recent operations, the
    projection's cache) and allocates many short-lived ones per batch; with the defaults every
    full collection walks all of them again. Most of what a worker allocates is freed by
    reference counting; the collector is only needed for reference cycles. Measured:
    a two-worker PostgreSQL drain of 3,000 operations, 1,363–1,517 ops/s with the defaults and
    1,856–2,022 with these settings (docs/performance.md). ``opledger worker`` calls it; a host
    that runs the worker in its own process (SQLite) may call it too, for the whole process.
    """
    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLDS)



def load_app_class(topic: str) -> type[LedgerApplication]:
    """Resolve ``module:Class`` to a ``LedgerApplication`` subclass.

    Raises:
        ConfigurationError: the topic does not resolve, or is not a ledger application.
    """
    try:
        cls = resolve_topic(topic)
    except Exception as exc:  # TopicError, ImportError, AttributeError: all a bad setting
        raise ConfigurationError(f"OPLEDGER_APP={topic!r} does not resolve: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, LedgerApplication)):
        raise ConfigurationError(f"OPLEDGER_APP={topic!r} is not a LedgerApplication subclass")
    return cls


@dataclass
class Store:
    """An open store: the host application and the status view. ``owner`` is True when this
    process owns a SQLite store for writing (the application's factory holds the lock)."""

    settings: Settings
    app: LedgerApplication
    view: StatusView
    owner: bool

    def close(self) -> None:
        self.view.close()
        self.app.close()


@contextmanager
def open_store(settings: Settings, *, write: bool, clock: Clock | None = None) -> Iterator[Store]:
    """Open the configured store.

    Args:
        settings: the settings.
        write: take part in writes. On SQLite this takes the single-writer lock; readers open
            the file read-only (DESIGN §8).
        clock: injected clock for the application.

    Raises:
        ConfigurationError: not migrated, schema or owner mismatch, bad OPLEDGER_APP.
        StoreLockedError: another process owns the SQLite store.
    """
    database = settings.database
    app_class = load_app_class(settings.app)
    check_store_identity(database, app_class.name)
    # A writable SQLite application takes the store's lock itself (StoreLockedError if another
    # process owns it); readers open the file read-only.
    read_only = not write and database.backend == "sqlite"
    app = app_class(env=database.library_env(create_table=False, read_only=read_only), clock=clock)
    try:
        view = open_view(database, read_only=read_only)
    except BaseException:
        app.close()
        raise
    store = Store(settings=settings, app=app, view=view, owner=write and database.backend == "sqlite")
    try:
        yield store
    finally:
        store.close()


def build_adapters(settings: Settings, app: LedgerApplication, clock: Clock) -> dict[str, Adapter]:
    """Build the adapters the application's integrations name.

    Raises:
        ConfigurationError: an integration names an adapter this process cannot build (e.g. the
            webhook adapter without ``OPLEDGER_WEBHOOK_SECRET``). Refusing to start beats failing
            operations for a worker's misconfiguration.
    """
    needed = {integration.adapter for integration in app.registry}
    adapters: dict[str, Adapter] = {}
    for name in needed:
        if name == "webhook":
            if settings.webhook_secret is None:
                raise ConfigurationError(
                    "integrations use the webhook adapter: set OPLEDGER_WEBHOOK_SECRET (whsec_...)")
            from adapters.webhook import WebhookAdapter

            adapters[name] = WebhookAdapter(secret=settings.webhook_secret.get_secret_value(), clock=clock)
        elif name == "fake":
            from adapters.fake import FakeAdapter

            adapters[name] = FakeAdapter()
        else:
            raise ConfigurationError(f"no adapter named {name!r} is available")
    return adapters


def default_worker_id() -> str:
    """``host:pid:random``: unique per worker process, readable in timelines."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def run_worker(settings: Settings, *, stop: threading.Event | None = None, worker_id: str | None = None,
               clock: Clock | None = None) -> None:
    """Run one worker process until SIGTERM/SIGINT (or ``stop``), then stop gracefully.

    On SQLite the worker owns the store and keeps the status projection itself. On PostgreSQL
    one worker at a time (a leadership lease with fenced writes) keeps the projection; every
    worker claims work.
    """
    clock = clock or SystemClock()
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    worker_id = worker_id or default_worker_id()
    with open_store(settings, write=True, clock=clock) as store:
        # Refuse (ConfigurationError) a store with ledger topics this code cannot resolve.
        check_readable_history(store.app, allow_unreadable=settings.allow_unreadable_events)
        # Report declarations that differ from those recorded under the same version (issue 14).
        report_declaration_drift(store.app)
        # One clock for leases (DESIGN §7): on PostgreSQL every `now` below is the database's.
        clock = store.view.lease_clock(clock, max_skew_seconds=settings.max_clock_skew_seconds)
        adapters = build_adapters(settings, store.app, clock)
        leader: threading.Thread | None = None
        if settings.database.backend == "postgres":
            # Every worker is ready to keep the projection; a leadership lease picks one writer.
            projection = StatusProjection(app=store.app, view=store.view, holder=worker_id)
            leader = threading.Thread(target=projection.run, args=(stop,), name="projection", daemon=True)
            leader.start()
        else:
            projection = StatusProjection(app=store.app, view=store.view)
        worker = Worker(
            app=store.app, view=store.view, adapters=adapters, clock=clock,
            config=WorkerConfig(worker_id=worker_id, lease_seconds=settings.lease_seconds,
                                batch_size=settings.batch_size, egress_slots=settings.worker_threads,
                                egress_per_host=settings.egress_per_host,
                                poll_interval_seconds=settings.poll_interval_seconds),
            projection=projection if leader is None else None,
            on_committed=projection.offer,
        )
        log.info("worker started", worker_id=worker.config.worker_id, backend=settings.database.backend)
        try:
            worker.run(stop, grace_seconds=settings.grace_seconds)
        finally:
            worker.close()
            stop.set()
            if leader is not None:
                leader.join(timeout=5)
        log.info("worker stopped", worker_id=worker.config.worker_id)
