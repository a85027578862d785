"""Wiring for long-running processes: open the store, build adapters, run a worker.

This is where the packages meet (DESIGN §2: the CLI wires them together): settings choose the
host application, the backend and the adapters; ``executors`` and ``projections`` stay free of
any adapter import.
"""

from __future__ import annotations

import gc
import os
import resource
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog
from eventsourcing.utils import resolve_topic

from adapters.followers import follow_metrics
from adapters.logs import OPERATION_CONTEXT
from executors.runtime import Worker, WorkerConfig
from ledger.adapter_names import BUILT_IN_ADAPTERS
from ledger.application import LedgerApplication
from ledger.clock import Clock, SystemClock
from ledger.config import Database, Settings
from ledger.declarations import DeliveryMode
from ledger.egress import Adapter
from ledger.errors import ConfigurationError, LedgerError, StoreDamagedError, StoreError
from ledger.facts import describe
from ledger.operation import Operation
from ledger.persistence import StoreLock
from ledger.settlement import load_settlement_policy
from ledger.store_files import check_store_files, check_store_path, damaged, is_damage
from ledger.store_identity import check_store_identity
from migrations.drivers import database_driver
from projections.drift import report_declaration_drift
from projections.history import check_readable_history
from projections.status import StatusProjection
from projections.view import OperatorQueries, StatusView
from projections.views import open_view

log = structlog.get_logger("opledger.runtime")

WORKER_GC_THRESHOLDS = (50_000, 50, 100)
"""Cyclic-GC thresholds of a worker process (CPython's defaults are 700, 10, 10)."""


OPEN_FILES_MARGIN = 256
"""File descriptors a worker needs beside one per egress slot: its store's connections, the
loops' wake-up pipes, logs, the HTTP server of ``--serve``."""


def raise_open_files_limit(slots: int) -> int:
    """Raise this process's soft limit on open files (``RLIMIT_NOFILE``) towards ``slots`` plus
    ``OPEN_FILES_MARGIN``, never past the hard limit: each egress call in flight holds a
    connection, and many systems start processes at a soft limit of 1,024. A limit that stays
    below is logged; calls past it fail to connect (``Failed(CONNECT)``, retryable: nothing
    was sent).

    Returns:
        The soft limit now in force.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = slots + OPEN_FILES_MARGIN
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit", wanted=wanted, error=str(exc))
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning("the open-file limit is below the egress slots; calls past it fail to connect",
                    open_files=soft, egress_slots=slots, hint="raise the hard limit (ulimit -Hn) or lower "
                    "OPLEDGER_EGRESS_SLOTS")
    return soft


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

    @property
    def queries(self) -> OperatorQueries:
        """The status view as operators read it (the CLI, the HTTP API): the narrow protocol
        their reads take (issue 28 item 3)."""
        return self.view

    def close(self) -> None:
        self.view.close()
        self.app.close()


@contextmanager
def open_store(settings: Settings, *, write: bool, clock: Clock | None = None) -> Iterator[Store]:
    """Open the configured store: ownership first, then the checks, then the application.

    On SQLite a writer takes the store's single-owner lock before anything reads the file (the
    path checks before it only ``lstat``); then the file checks (a lost WAL, the header, and
    unless ``OPLEDGER_OPEN_CHECK=header`` ``PRAGMA quick_check``, for readers too: a read
    command on a damaged store fails with the same error), then the identity, then the
    application and view.
    Readers take no lock and open the file read-only (DESIGN §8). A damaged SQLite file met
    while the store is in use (in the ``with`` body) is raised as the same one-line
    ``StoreDamagedError``.

    Args:
        settings: the settings.
        write: take part in writes (on SQLite: own the store).
        clock: injected clock for the application.

    Raises:
        ConfigurationError: not migrated, bad OPLEDGER_APP.
        StoreIdentityError: the store's identity differs (``ledger.store_identity``).
        StorePathError: an unsafe SQLite path or permissions.
        StoreDamagedError: the SQLite file is damaged.
        StoreLockedError: another process owns the SQLite store.
    """
    database = settings.database
    app_class = load_app_class(settings.app)
    owned = not database_driver(database).shared  # one process owns the store: a file of its own
    lock = StoreLock(database.path).acquire() if owned and write and database.path is not None else None
    try:
        if owned and database.path is not None:
            check_store_path(database.path)
            if database.path.exists():
                check_store_files(database.path, thorough=settings.open_check == "quick")
        check_store_identity(database, app_class.name, store_id=settings.store_id)
        read_only = not write and owned
        try:
            app = app_class(env=database.library_env(create_table=False, read_only=read_only), clock=clock)
        except Exception as exc:
            if _is_damage(database, exc):
                raise _translated(database, exc) from None
            raise
        try:
            view = open_view(database, read_only=read_only)
        except BaseException:
            app.close()
            raise
        store = Store(settings=settings, app=app, view=view, owner=write and owned)
        try:
            yield store
        except Exception as exc:
            if _is_damage(database, exc):
                raise _translated(database, exc) from None
            raise
        finally:
            store.close()
    finally:
        if lock is not None:
            lock.release()


def _is_damage(database: Database, exc: BaseException) -> bool:
    return not database_driver(database).shared and is_damage(exc)


def _translated(database: Database, exc: BaseException) -> StoreDamagedError:
    assert database.path is not None
    return damaged(database.path, str(exc.__cause__ or exc))


class _StopOnDamage(StatusProjection):
    """The SQLite owner's status projection: a damaged file met while running stops the worker
    (``stop`` is set, the damage kept in ``damage`` and raised once the worker has stopped),
    instead of a traceback logged every cycle by a worker that never exits."""

    def __init__(self, *, app: LedgerApplication, view: StatusView, stop: threading.Event) -> None:
        super().__init__(app=app, view=view)
        self.stop = stop
        self.damage: Exception | None = None

    def run_once(self) -> int:
        try:
            return super().run_once()
        except Exception as exc:
            if not is_damage(exc):
                raise
            log.error("the store is damaged; stopping", error=str(exc))
            self.damage = exc
            self.stop.set()
            return 0


def build_adapters(settings: Settings, app: LedgerApplication, clock: Clock) -> dict[str, Adapter]:
    """Build the adapters the application's integrations name.

    Every name of ``ledger.adapter_names.BUILT_IN_ADAPTERS`` is built here (a test holds the
    two together); declarations naming any other adapter are refused when parsed unless the host
    registered it, and then need the host's own worker.

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
                    "integrations use the webhook adapter: set OPLEDGER_WEBHOOK_SECRET (whsec_...; make one with "
                    "`opledger secret new`)")
            from adapters.webhook import WebhookAdapter
            from adapters.webhook.adapter import WebhookConfig

            adapters[name] = WebhookAdapter(secret=settings.webhook_secret.get_secret_value(), clock=clock,
                                            config=WebhookConfig(callback_base_url=settings.callback_base_url))
            if settings.callback_base_url is None and any(
                    i.adapter == "webhook" and i.delivery_mode is DeliveryMode.CALLBACK for i in app.registry):
                log.warning("callback-mode integrations but no OPLEDGER_CALLBACK_BASE_URL: requests carry no "
                            "X-Callback-Url, so providers must know where to call back")
        elif name == "lro":
            if settings.webhook_secret is None:
                raise ConfigurationError(
                    "integrations use the lro adapter: set OPLEDGER_WEBHOOK_SECRET (whsec_...; make one with "
                    "`opledger secret new`), which signs its calls")
            from adapters.lro import LroAdapter

            adapters[name] = LroAdapter(secret=settings.webhook_secret.get_secret_value(), clock=clock)
        elif name == "fake":
            from adapters.fake import FakeAdapter

            adapters[name] = FakeAdapter()
        else:  # registered by the host (ledger.register_adapter), built only by its own worker
            raise ConfigurationError(
                f"integrations use adapter {name!r}, which `opledger worker` does not build (it builds "
                f"{', '.join(BUILT_IN_ADAPTERS)}): run the worker in your process with "
                f"executors.Worker(adapters={{{name!r}: ...}})")
    return adapters


def default_worker_id() -> str:
    """``host:pid:random``: unique per worker process, readable in timelines."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _remembering(offer: Callable[[Iterable[Operation]], None]) -> Callable[[Iterable[Operation]], None]:
    # The worker's commit hook: the log context learns each committed operation (integration,
    # tenant, epoch, attempt, trace; adapters.logs), then the projection gets it as before.
    def on_committed(ops: Iterable[Operation]) -> None:
        committed = list(ops)
        OPERATION_CONTEXT.remember(committed)
        offer(committed)

    return on_committed


Beside = Callable[["Store", threading.Event], list[threading.Thread]]
"""Services a worker process runs beside itself on its open store (e.g. the HTTP server,
``adapters.http.serve.serve_beside_worker``): started with the store and the stop event, they
return their threads, which end once the event is set."""


def run_worker(settings: Settings, *, stop: threading.Event | None = None, worker_id: str | None = None,
               clock: Clock | None = None, beside: Beside | None = None) -> None:
    """Run one worker process until SIGTERM/SIGINT (or ``stop``), then stop gracefully.

    On SQLite the worker owns the store and keeps the status projection itself. On PostgreSQL
    one worker at a time (a leadership lease with fenced writes) keeps the projection; every
    worker claims work.

    Args:
        settings: the store, the application and the worker's settings.
        stop: set to stop (the signal handlers set it in the main thread).
        worker_id: this worker's name in timelines (default ``host:pid:random``).
        clock: the injected clock (the system clock by default).
        beside: services started on the open store once the worker is built, stopped with it
            (``opledger worker --serve``: the HTTP server sharing the store's single writer).
    """
    clock = clock or SystemClock()
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    worker_id = worker_id or default_worker_id()
    raise_open_files_limit(settings.egress_slots)
    with open_store(settings, write=True, clock=clock) as store:
        # Refuse (ConfigurationError) a store with ledger topics this code cannot resolve.
        check_readable_history(store.app, allow_unreadable=settings.allow_unreadable_events)
        # Report declarations that differ from those recorded under the same version (issue 14).
        report_declaration_drift(store.app)
        # One clock for leases (DESIGN §7): on PostgreSQL every `now` below is the database's.
        clock = store.view.lease_clock(clock, max_skew_seconds=settings.max_clock_skew_seconds)
        adapters = build_adapters(settings, store.app, clock)
        leader: threading.Thread | None = None
        database = database_driver(settings.database)
        if database.shared:
            # Every worker is ready to keep the projection; a leadership lease picks one writer.
            projection = StatusProjection(app=store.app, view=store.view, holder=worker_id)
            leader = threading.Thread(target=projection.run, args=(stop,), name="projection", daemon=True)
            leader.start()
        else:
            projection = _StopOnDamage(app=store.app, view=store.view, stop=stop)
        worker = Worker(
            app=store.app, view=store.view, adapters=adapters, clock=clock,
            config=WorkerConfig(worker_id=worker_id, lease_seconds=settings.lease_seconds,
                                batch_size=settings.batch_size, egress_slots=settings.egress_slots,
                                egress_per_host=settings.egress_per_host, egress_threads=settings.worker_threads,
                                poll_interval_seconds=settings.poll_interval_seconds,
                                poll_lease_seconds=settings.poll_lease_seconds,
                                summary_interval_seconds=settings.log_summary_seconds,
                                settlement_policy=load_settlement_policy(settings.settlement_policy)),
            projection=projection if leader is None else None,
            on_committed=_remembering(projection.offer),
        )
        if leader is not None:
            # Wake-ups (issue 17): the projection and this worker when events are appended, this
            # worker when status rows change; polling stays as the fallback.
            events_channel = getattr(store.app.recorder, "channel_name", None)
            wakeups: dict[str, list[Callable[[str], None]]] = {
                database.status_channel(): [lambda _payload: worker.wake()]}
            if events_channel:  # the worker reads the log's tail when an intent was appended
                wakeups[events_channel] = [lambda _payload: projection.wake(), worker.wake_for_log]
            database.wakeups_start(wakeups, stop)
        # The metrics projection is kept where it is served: by `opledger serve` on PostgreSQL
        # (a leadership lease picks one server); here only by the SQLite owner. In every worker
        # it decoded each event a second time: 20 % of the two-worker end-to-end rate.
        metrics = follow_metrics(settings.database, store.app, stop, holder=None) if leader is None else None
        services = beside(store, stop) if beside is not None else []
        log.info("worker started", worker_id=worker.config.worker_id, backend=database.name)
        try:
            worker.run(stop, grace_seconds=settings.grace_seconds)
        except LedgerError:
            raise
        except Exception as exc:
            if _is_damage(settings.database, exc):
                raise  # open_store makes it the one-line StoreDamagedError
            # Not an outage the worker rides out (ledger.outages): say what, once, and stop.
            log.error("worker stopped: the store refused it for good", error=describe(exc))
            raise StoreError(f"the worker stopped: {describe(exc)}") from None
        finally:
            worker.close()
            stop.set()
            for thread in (leader, metrics, *services):
                if thread is not None:
                    thread.join(timeout=5)
        if isinstance(projection, _StopOnDamage) and projection.damage is not None:
            raise projection.damage  # open_store makes it the one-line StoreDamagedError
        log.info("worker stopped", worker_id=worker.config.worker_id)
