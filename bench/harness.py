"""What every scenario shares: fresh stores, worker processes, waiting, timing and results.

Each measured run gets a fresh store: a new PostgreSQL schema (``bench_<random>``, dropped
afterwards) or a new SQLite file in a temporary directory. Times come from
``time.perf_counter``; a scenario repeats its runs, interleaving each configuration with its
baseline, and reports median, min and max.
"""

from __future__ import annotations

import base64
import gc
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.processes import WorkerProcess, spawn_worker
from bench.app import APP_TOPIC, BenchApp
from ledger.config import Database
from ledger.persistence import StoreLock
from migrations import migrate
from projections.status import StatusProjection
from projections.view import StatusView
from projections.views import open_view

REPO = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("OPLEDGER_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")
SECRET = "whsec_" + base64.b64encode(b"opledger-benchmark-secret-32byte").decode()
BACKENDS = ("postgres", "sqlite")
POLL_SECONDS = 0.02
"""How often the runner polls for completion; a run's time is late by at most this much."""
SEED_CHUNK = 500
"""Items with intents committed per ``save()`` when seeding (setup only, never timed)."""


@dataclass
class Options:
    """The runner's options (``python -m bench --help``).

    Attributes:
        smoke: tiny sizes, one repetition each, for CI (never a timed assertion).
        full: also run the opt-in big size (the 1M-event log, on PostgreSQL).
        repeat: repetitions per configuration (median, min, max over them).
        n: operations per throughput run (overrides the scenario default).
        workdir: temporary directory for SQLite stores and worker logs.
        backends: the backends a scenario that honours it runs on (``--backend``; history).
    """

    smoke: bool = False
    full: bool = False
    repeat: int = 3
    n: int | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="opledger-bench-")))
    backends: tuple[str, ...] = BACKENDS

    def size(self, default: int, smoke: int) -> int:
        """``n`` if given, else ``smoke`` in smoke mode, else ``default``."""
        if self.n is not None:
            return self.n
        return smoke if self.smoke else default

    @property
    def repetitions(self) -> int:
        return 1 if self.smoke else self.repeat


# ---------------------------------------------------------------------- results


@dataclass(frozen=True)
class Stats:
    """Median, min and max of repeated samples."""

    median: float
    min: float
    max: float
    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: list[float]) -> Stats:
        return cls(median=statistics.median(samples), min=min(samples), max=max(samples), samples=tuple(samples))


@dataclass
class Result:
    """One row of ``bench/results.json``: a scenario and configuration.

    ``ratio`` is this row's median over its baseline's median (both higher-is-better rates, or
    both times, as ``unit`` says); None where no baseline ran beside it.
    """

    name: str
    backend: str
    workers: int | None
    stats: Stats
    unit: str
    ratio: float | None = None
    baseline: str | None = None
    n: int | None = None
    target: str | None = None
    met: bool | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name, "backend": self.backend, "workers": self.workers,
            "median": round(self.stats.median, 4), "min": round(self.stats.min, 4),
            "max": round(self.stats.max, 4), "unit": self.unit,
            "ratio": None if self.ratio is None else round(self.ratio, 4),
            "samples": [round(s, 4) for s in self.stats.samples],
        }
        for key in ("baseline", "n", "target", "met"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.note:
            data["note"] = self.note
        if self.extra:
            data["extra"] = self.extra
        return data


@contextmanager
def worker_gc() -> Iterator[None]:
    """Run the block with the garbage collector set as ``opledger worker`` sets it
    (``adapters.runtime.tune_gc_for_worker``), then restore it: in-process scenarios measure
    code that runs inside worker processes, such as the status projection."""
    from adapters.runtime import tune_gc_for_worker

    thresholds = gc.get_threshold()
    tune_gc_for_worker()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


class CpuMeter:
    """CPU time spent during a run, split by who spent it, in µs per operation.

    ``start`` and ``stop`` read CPU times (user + system, psutil) of this process (the host:
    producer threads and the runner's polling), of the worker processes given, and of the whole
    machine; ``other`` is the machine's rest, which on this machine is mostly PostgreSQL. With
    the run's wall time it shows how much of two cores a run used and on what.
    """

    def __init__(self, pids: list[int]) -> None:
        import psutil

        self._processes = [psutil.Process(pid) for pid in pids]
        self._began: tuple[float, float, float] | None = None

    def _read(self) -> tuple[float, float, float]:
        import psutil

        def used(times: Any) -> float:
            return times.user + times.system

        machine = psutil.cpu_times()
        busy = machine.user + machine.nice + machine.system + getattr(machine, "irq", 0) + getattr(machine, "softirq", 0)
        return used(psutil.Process().cpu_times()), sum(used(p.cpu_times()) for p in self._processes), busy

    def start(self) -> None:
        self._began = self._read()

    def stop(self, operations: int) -> dict[str, float]:
        """Returns ``{"host", "workers", "other", "total"}``: CPU µs per operation since ``start``."""
        assert self._began is not None
        host, workers, machine = (after - before for after, before in zip(self._read(), self._began))
        per_op = 1e6 / max(operations, 1)
        return {"host": round(host * per_op), "workers": round(workers * per_op),
                "other": round(max(machine - host - workers, 0.0) * per_op), "total": round(machine * per_op)}


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """The run (each a :meth:`CpuMeter.stop`) whose ``total`` is the median (the lower middle
    one of an even count), whole, so that its parts add up to its total."""
    return sorted(runs, key=lambda run: run["total"])[(len(runs) - 1) // 2] if runs else {}


def rate(count: int, seconds: float) -> float:
    """``count`` per second (a zero duration counts as one microsecond)."""
    return count / max(seconds, 1e-6)


# ---------------------------------------------------------------------- stores


@contextmanager
def fresh_store(backend: str, options: Options, *, migrated: bool = True) -> Iterator[Database]:
    """A new, empty store migrated for :class:`BenchApp`; dropped afterwards."""
    if backend == "postgres":
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        database = Database.parse(f"{PG_URL}?schema={schema}")
        cleanup: Callable[[], None] = lambda: drop_schema(schema)
    else:
        directory = options.workdir / f"sqlite-{uuid.uuid4().hex[:8]}"
        directory.mkdir(parents=True)
        database = Database.parse(f"sqlite:///{directory / 'bench.db'}")
        cleanup = lambda: shutil.rmtree(directory, ignore_errors=True)
    try:
        if migrated:
            migrate(database, BenchApp)
        yield database
    finally:
        cleanup()


def url_of(database: Database) -> str:
    """The URL a worker process is given for ``database``."""
    if database.backend == "sqlite":
        return f"sqlite:///{database.path}"
    return f"{PG_URL}?schema={database.schema}"


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(Database.parse(PG_URL).conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def postgres_version() -> str:
    import psycopg

    with psycopg.connect(Database.parse(PG_URL).conninfo()) as conn:
        return str(conn.execute("SHOW server_version").fetchone()[0])


@contextmanager
def writer(database: Database) -> Iterator[BenchApp]:
    """The host application, writing. On SQLite it takes the store's single-writer lock, so it
    must be closed before a worker process starts (DESIGN §8)."""
    lock = StoreLock(database.path).acquire() if database.backend == "sqlite" else None
    app = BenchApp(env=database.library_env(create_table=False))
    try:
        yield app
    finally:
        app.close()
        if lock is not None:
            lock.release()


def reader(database: Database) -> StatusView:
    """The status view for polling (read-only on SQLite, where a worker owns the store)."""
    return open_view(database, read_only=database.backend == "sqlite")


def seed_pending(database: Database, count: int, *, integration: str = "bench.noop",
                 target: str | None = None, project: bool = True) -> float:
    """Commit ``count`` items with their intents (in chunks) and project them, so workers find
    them due at once. Returns the seconds the projection took (0 when ``project`` is False)."""
    with writer(database) as app:
        for start in range(0, count, SEED_CHUNK):
            app.seed(start, min(SEED_CHUNK, count - start), integration=integration, target=target)
        if not project:
            return 0.0
        view = open_view(database)
        try:
            began = time.perf_counter()
            StatusProjection(app=app, view=view).catch_up()
            return time.perf_counter() - began
        finally:
            view.close()


# ---------------------------------------------------------------------- worker processes


def worker_env(database: Database, *, lease_seconds: float = 30.0, threads: int | None = None,
               poll_seconds: float = 0.05, **extra: str) -> dict[str, str]:
    """Settings for a worker process of :class:`BenchApp` (as ``tests/process`` does); egress
    slots are the default unless ``threads`` is given."""
    if threads is not None:
        extra = {"OPLEDGER_WORKER_THREADS": str(threads), **extra}
    return {
        "OPLEDGER_DATABASE_URL": url_of(database),
        "OPLEDGER_APP": APP_TOPIC,
        "OPLEDGER_LEASE_SECONDS": str(lease_seconds),
        "OPLEDGER_POLL_INTERVAL_SECONDS": str(poll_seconds),
        "OPLEDGER_WEBHOOK_SECRET": SECRET,
        "OPLEDGER_LOG_FORMAT": "json",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        **extra,
    }


def start_workers(count: int, env: dict[str, str], options: Options, label: str) -> list[WorkerProcess]:
    """Spawn ``count`` worker processes (``adapters.processes.spawn_worker``)."""
    logs = options.workdir / "logs"
    return [spawn_worker(env, logs / f"{label}-{uuid.uuid4().hex[:6]}-{i}.log") for i in range(count)]


def wait_ready(workers: list[Any], timeout: float = 60.0, marker: str = "worker started") -> float:
    """Wait until every worker (anything with ``log_path`` and ``alive()``) logged ``marker``;
    returns ``perf_counter`` when the first did (it starts working right after that line)."""
    deadline = time.perf_counter() + timeout
    first: float | None = None
    pending = list(workers)
    while pending:
        for worker in list(pending):
            if marker in worker.log_path.read_text(errors="replace"):
                pending.remove(worker)
                first = first or time.perf_counter()
            elif not worker.alive():
                raise RuntimeError(f"worker exited early; see {worker.log_path}:\n{tail(worker.log_path)}")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"workers not ready after {timeout}s; see {pending[0].log_path}")
        if pending:
            time.sleep(0.005)
    assert first is not None
    return first


def stop_workers(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        worker.kill()


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_until(predicate: Callable[[], Any], *, timeout: float, what: str,
               workers: list[WorkerProcess] = (), interval: float = POLL_SECONDS) -> float:  # type: ignore[assignment]
    """Poll ``predicate`` until truthy; returns ``perf_counter`` at that moment.

    Raises:
        TimeoutError: not within ``timeout`` seconds (or a worker died unexpectedly).
    """
    deadline = time.perf_counter() + timeout
    while True:
        if predicate():
            return time.perf_counter()
        if time.perf_counter() > deadline:
            logs = "".join(f"\n--- {w.log_path}:\n{tail(w.log_path)}" for w in workers)
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{logs}")
        for worker in workers:
            if not worker.alive():
                raise RuntimeError(f"worker died while waiting for {what}:\n{tail(worker.log_path)}")
        time.sleep(interval)


def settled_count(view: StatusView) -> int:
    """Operations the status projection shows as settled."""
    return view.counts().get("settled", 0)
