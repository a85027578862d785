"""Shared fixtures: a fresh store per test on each backend.

PostgreSQL tests use a new schema per test. When PostgreSQL is unreachable they are skipped on
a developer machine but FAIL when the ``CI`` environment variable is set, so CI can never pass
without having run them.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ledger.config import Database

SECRET = "whsec_" + base64.b64encode(b"opledger-process-tests-secret!!").decode()
"""The Standard Webhooks secret shared by test partners and test workers."""

PG_URL = os.environ.get("OPLEDGER_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")


_REACHED: list[bool] = []
"""Holds ``True`` once this process has reached the server: every PostgreSQL test asked again
with a connection of its own (about 12 ms each); a server lost later fails the test that
connects, which is what CI requires anyway."""


def _postgres_reachable() -> str | None:
    import psycopg

    if _REACHED:
        return None
    try:
        with psycopg.connect(Database.parse(PG_URL).conninfo(), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        return str(exc)
    _REACHED.append(True)
    return None


def require_postgres() -> None:
    """Fail under CI, skip elsewhere, when PostgreSQL is unreachable."""
    problem = _postgres_reachable()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL at {PG_URL} is unreachable and CI is set: {problem}")
    pytest.skip(f"PostgreSQL unreachable: {problem}")


def new_postgres_url() -> tuple[str, str]:
    """Return ``(url, schema)`` for a fresh, empty schema."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    return f"{PG_URL}?schema={schema}", schema


def drop_schema(schema: str) -> None:
    """Drop a test's schema. A process of the test still writing to it (a ``serve`` fixture
    torn down after the test body) can make the DROP the victim of a deadlock: try again."""
    import psycopg

    for attempt in range(5):
        try:
            with psycopg.connect(Database.parse(PG_URL).conninfo(), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            return
        except psycopg.errors.DeadlockDetected:
            if attempt == 4:
                raise
            time.sleep(0.2)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A database URL for a fresh, unmigrated store, on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store' / 'opledger.db'}"
        return
    require_postgres()
    url, schema = new_postgres_url()
    try:
        yield url
    finally:
        drop_schema(schema)


@pytest.fixture
def database(database_url: str) -> Database:
    return Database.parse(database_url)


@pytest.fixture
def migrated(database: Database) -> Database:
    """A fresh store migrated for the demo ``OrdersApp``."""
    from adapters.demo.orders import OrdersApp
    from tests.stores import migrated_store

    migrated_store(database, OrdersApp)
    return database


@pytest.fixture
def clock():
    from ledger.clock import FakeClock

    return FakeClock()


@pytest.fixture
def orders_app(migrated: Database, clock) -> Iterator:
    """The demo host application on a migrated store, with an injected fake clock."""
    from adapters.demo.orders import OrdersApp

    app = OrdersApp(env=migrated.library_env(create_table=False), clock=clock)
    try:
        yield app
    finally:
        app.close()


@pytest.fixture
def modes_db(database: Database) -> Database:
    """A fresh store migrated for the test ``ModesApp`` (one integration per delivery mode)."""
    from tests.apps import ModesApp
    from tests.stores import migrated_store

    migrated_store(database, ModesApp)
    return database


@pytest.fixture
def partner(tmp_path: Path) -> Iterator:
    """The reference partner as a separate process, with its durable log in ``tmp_path``."""
    from adapters.partner import start_partner_process

    with start_partner_process(log_path=tmp_path / "partner.db", secret=SECRET) as running:
        yield running


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05, what: str = "") -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")


def database_now(database: Database) -> datetime:
    """The PostgreSQL server's own clock now (``clock_timestamp()``, UTC): the clock leases and
    call windows are measured by (DESIGN §7). PostgreSQL only."""
    import psycopg

    with psycopg.connect(database.conninfo()) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0].astimezone(UTC)


def succeed_directly(app: Any, op_id: uuid.UUID, clock: Any) -> None:
    """Take operation ``op_id`` of ``app`` (a ``LedgerApplication``) from pending to succeeded
    through the commands a worker would run (claim, start an attempt, succeed), at ``clock.now()``,
    without egress; saved."""
    op = app.get_operation(op_id)
    epoch = op.claim(now=clock.now(), worker_id="w", lease_seconds=30)
    op.start_attempt(epoch=epoch, now=clock.now(), attempt_id=uuid.uuid4(), request_fingerprint="f")
    op.succeed(epoch=epoch, now=clock.now(), attempt_id=op.last_attempt_id)
    app.save(op)


def close_directly(app: Any, op_id: uuid.UUID, clock: Any, entity_version: int) -> None:
    """:func:`succeed_directly`, then settle operation ``op_id`` against its source entity at
    ``entity_version`` (the entity's action itself is not run): closed, as ``opledger archive``
    selects it (``ledger.retention.is_archivable``); saved."""
    succeed_directly(app, op_id, clock)
    op = app.get_operation(op_id)
    op.settle(now=clock.now(), entity_version=entity_version)
    app.save(op)


@pytest.fixture
def json_logs() -> Iterator[Callable[[], None]]:
    """Call the yielded function inside the test (after ``capsys`` captures stderr) for the
    production log configuration (JSON to stderr, secrets redacted); the structlog defaults
    come back after the test (loggers are not cached, so nothing outlives it)."""
    import structlog

    from adapters.logs import configure_logging

    try:
        yield lambda: configure_logging("json", cache_loggers=False)
    finally:
        structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _log_capture_stays_possible(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Commands run in process (Typer's CliRunner) configure logging as a real process does,
    with each logger cached on first use; a module's logger cached then would keep that
    configuration, and ``structlog.testing.capture_logs`` in any later test would see nothing
    of it. In tests the loggers are never cached (production keeps the cache: it is faster), and
    a configuration a test made ends with it: ``opledger simulate`` configures CRITICAL, and a
    later test of the same process capturing a warning saw nothing."""
    import logging

    import structlog

    import adapters.logs

    configure = adapters.logs.configure_logging
    configured: list[bool] = []

    def uncached(*args: Any, **kwargs: Any) -> None:
        configured.append(True)
        configure(*args, **{**kwargs, "cache_loggers": False})

    servers = {name: (log.handlers[:], log.propagate, log.level)
               for name in adapters.logs.SERVER_LOGGERS for log in [logging.getLogger(name)]}
    monkeypatch.setattr(adapters.logs, "configure_logging", uncached)
    yield
    if configured:
        structlog.reset_defaults()
        for name, (handlers, propagate, level) in servers.items():
            log = logging.getLogger(name)
            log.handlers, log.propagate = handlers, propagate
            log.setLevel(level)


def pytest_configure(config: pytest.Config) -> None:
    """Compile the project's modules once, before the test processes start (issue 28 item 5).

    A machine may set ``PYTHONDONTWRITEBYTECODE`` (the reference machine and CI do). Then no
    ``.pyc`` is ever written, and each of the 500 or so Python processes the suite starts
    (workers, CLI commands, partners) compiled the project from source again: about 0.13 s of
    CPU each, a minute of the suite's two cores. Existing ``.pyc`` files are read whatever the
    variable says, and ``compileall`` writes them whatever it says. This process and its xdist
    workers may write their own too (pytest's rewritten test modules among them).
    """
    import compileall
    import sys

    sys.dont_write_bytecode = False
    if not hasattr(config, "workerinput"):  # the controller, before any worker starts
        root = Path(__file__).resolve().parents[1]
        for package in ("ledger", "projections", "executors", "adapters", "migrations", "tests", "bench"):
            compileall.compile_dir(root / package, quiet=2, workers=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first: the order :func:`pytest_xdist_make_scheduler` hands tests out in. The
    ``slow`` tests, then processes and simulations, integration, the rest, and ``postgres_alone``
    last (within its group); the sort is stable, so a module's tests keep their order within a
    rank."""
    items.sort(key=_schedule_rank)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Schedule ``pytest -n 4`` on 2 cores (issue 28 item 5: the suite within 10 minutes).

    xdist hands out groups of tests, one group at a time, in the order of each group's first
    test (``--no-loadscope-reorder``, pyproject.toml; the sort above):
    - the files under ``tests/process/`` make two groups (every other file by name), so that at
      most two process tests run at once (together they start dozens of workers, each with its
      pools: three or more side by side ran the server out of its 100 connections), and first,
      so that they run beside the short tests instead of being the run's tail;
    - every other file is a group of its own (its module fixtures set up once, its tests in file
      order: ``test_openapi`` checks what its earlier tests saw).
    """
    from xdist.scheduler import LoadScopeScheduling

    process = sorted(path.name for path in (Path(__file__).parent / "process").glob("test_*.py"))

    class FilesAndProcesses(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            if not path.startswith("tests/process/"):
                return path
            name = path.rsplit("/", 1)[-1]
            return f"tests/process/ {process.index(name) % 2 if name in process else 0}"

    return FilesAndProcesses(config, log)


def _schedule_rank(item: pytest.Item) -> int:
    if item.get_closest_marker("postgres_alone"):
        return 4  # last of its group: it waits for every running PostgreSQL test, short ones by then
    if item.get_closest_marker("slow"):
        return 0
    if item.nodeid.startswith(("tests/process/", "tests/simulation/")):
        return 1
    if item.nodeid.startswith("tests/integration/"):
        return 2
    return 3


def _uses_postgres(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return item.get_closest_marker("postgres") is not None or any(
        isinstance(value, str) and value == "postgres" for value in params.values())


@pytest.fixture(autouse=True)
def _postgres_server_turn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A test marked ``postgres_alone`` (it restarts the PostgreSQL server) runs while no other
    test of this run uses the server, in any xdist worker: each PostgreSQL test holds a shared lock on a file
    all workers see, the restarting test an exclusive one. A turnstile keeps a waiting restart
    from starving behind a stream of shared holders."""
    import fcntl

    node = request.node
    exclusive = node.get_closest_marker("postgres_alone") is not None
    if not exclusive and not _uses_postgres(node):
        yield
        return
    shared = tmp_path_factory.getbasetemp().parent  # the run's own directory, common to its workers
    with open(shared / "postgres-turnstile.lock", "a") as turnstile, open(shared / "postgres.lock", "a") as server:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if not exclusive:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        fcntl.flock(server, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(server, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
