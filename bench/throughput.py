"""Throughput: drain and end to end, against Procrastinate on the same PostgreSQL.

**Drain**: N items with their intents are committed and projected first (setup, untimed); then
worker processes start (``adapters.processes.spawn_worker``), and the time runs from the first
worker's ``worker started`` log line until the status projection shows all N settled (claim,
``AttemptStarted``, egress, ``Succeeded``, ``Settled`` with the item's settlement event).

**End to end**: workers are running and idle; the host then commits one item + intent per
transaction (``BenchApp.create_with_intent``: ``intend`` + ``save``) from two producer threads,
and the time runs from the first intent until the projection shows all N settled. On SQLite,
where one process owns the store (DESIGN §8), host and worker share one process: the worker is
``adapters.runtime.run_worker`` on a thread beside the producer, as an embedded host runs it.

"2 workers" on SQLite is one process with more egress threads (256, the settings' maximum).

On PostgreSQL both end-to-end runs (ours and the baseline's) also record where the CPU went, in
µs per operation (``bench.harness.CpuMeter``): the host process, the worker processes, and the
rest of the machine (mostly PostgreSQL); ``extra.cpu_us_per_op`` in the results, taken whole
from the repetition with the median total.

The baseline is Procrastinate with worker concurrency 4: drain = ``batch_defer`` N no-op jobs,
start the workers, time until all succeeded; end to end = workers running, two producer threads
``defer`` one job per transaction. Worker counts match (1 or 2 processes each). Both sides poll
for completion over one connection held open.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from bench import procrastinate_baseline as queue
from bench.app import HTTP, NOOP
from bench.harness import (
    SECRET,
    CpuMeter,
    Options,
    Result,
    Stats,
    fresh_store,
    median_run,
    rate,
    reader,
    seed_pending,
    settled_count,
    start_workers,
    stop_workers,
    wait_ready,
    wait_until,
    worker_env,
    writer,
)
from ledger.config import Settings

TUNED_THREADS = 200
"""Egress threads per worker in the main rows. A worker claims at most ``egress_threads`` minus
in-flight operations per cycle while it loads ``batch_size`` (200) due operations, so with the
default 8 threads it loads 200 aggregates to claim 8 (see the ``.defaults`` rows)."""
SQLITE_MAX_THREADS = 256
PRODUCERS = 2
TIMEOUT_SECONDS = 900.0
PARTNER_PATH = "/bench"


@dataclass(frozen=True)
class Config:
    """One opledger throughput configuration."""

    kind: str  # "drain" or "e2e"
    backend: str
    workers: int
    adapter: str = "fake"  # or "http"
    threads: int = TUNED_THREADS
    small: bool = False  # run with a smaller N (the slow default-settings rows)

    @property
    def name(self) -> str:
        suffix = {"fake": "", "http": ".http"}[self.adapter]
        return f"{self.kind}{suffix}" + (".defaults" if self.threads == 8 else "")

    @property
    def egress_threads(self) -> int:
        if self.backend == "sqlite" and self.workers == 2:
            return max(self.threads, SQLITE_MAX_THREADS) if self.threads != 8 else 16
        return self.threads

    @property
    def processes(self) -> int:
        return 1 if self.backend == "sqlite" else self.workers


def configs(options: Options) -> list[Config]:
    if options.smoke:  # every kind once, the target rows only, to stay well under a minute
        return [Config(kind, backend, 2) for kind in ("drain", "e2e") for backend in ("postgres", "sqlite")] + [
            Config("drain", "postgres", 2, adapter="http")]
    found = [Config(kind, backend, w) for kind in ("drain", "e2e") for backend in ("postgres", "sqlite") for w in (1, 2)]
    found += [Config("drain", "postgres", 2, threads=8, small=True), Config("drain", "sqlite", 1, threads=8, small=True)]
    found += [Config("drain", "postgres", 2, adapter="http"), Config("drain", "sqlite", 1, adapter="http"),
              Config("e2e", "postgres", 2, adapter="http")]
    return found


# ---------------------------------------------------------------------- opledger runs


def _target(cfg: Config, partner_url: str | None) -> str | None:
    return f"{partner_url}{PARTNER_PATH}" if cfg.adapter == "http" else None


def drain(cfg: Config, n: int, options: Options, partner_url: str | None) -> tuple[float, dict]:
    """One drain run; returns (seconds, extra facts)."""
    integration = HTTP if cfg.adapter == "http" else NOOP
    with fresh_store(cfg.backend, options) as database:
        seed_pending(database, n, integration=integration, target=_target(cfg, partner_url))
        view = reader(database)
        workers = start_workers(cfg.processes, worker_env(database, threads=cfg.egress_threads), options,
                                f"{cfg.name}-{cfg.backend}")
        try:
            began = wait_ready(workers)
            done = wait_until(lambda: settled_count(view) >= n, timeout=TIMEOUT_SECONDS,
                              what=f"{n} settled ({cfg})", workers=workers)
        finally:
            stop_workers(workers)
            view.close()
    return done - began, {}


def _produce(app, n: int, producers: int, integration: str, target: str | None) -> float:
    """Commit ``n`` items with intents, one transaction each, from ``producers`` threads.
    Returns the seconds it took."""
    began = time.perf_counter()

    def produce(offset: int) -> None:
        for i in range(offset, n, producers):
            app.create_with_intent(i, integration=integration, target=target)

    with ThreadPoolExecutor(producers) as pool:
        list(pool.map(produce, range(producers)))
    return time.perf_counter() - began


def e2e_postgres(cfg: Config, n: int, options: Options, partner_url: str | None) -> tuple[float, dict]:
    integration = HTTP if cfg.adapter == "http" else NOOP
    with fresh_store(cfg.backend, options) as database:
        view = reader(database)
        workers = start_workers(cfg.processes, worker_env(database, threads=cfg.egress_threads), options,
                                f"{cfg.name}-{cfg.backend}")
        try:
            wait_ready(workers)
            time.sleep(0.5)  # let the projection leader settle in
            meter = CpuMeter([worker.pid for worker in workers])
            with writer(database) as app:
                meter.start()
                began = time.perf_counter()
                produced = _produce(app, n, PRODUCERS, integration, _target(cfg, partner_url))
                done = wait_until(lambda: settled_count(view) >= n, timeout=TIMEOUT_SECONDS,
                                  what=f"{n} settled ({cfg})", workers=workers)
                cpu = meter.stop(n)
        finally:
            stop_workers(workers)
            view.close()
    return done - began, {"producer_seconds": round(produced, 3), "producers": PRODUCERS, "cpu_us_per_op": cpu}


def e2e_sqlite(cfg: Config, n: int, options: Options, partner_url: str | None) -> tuple[float, dict]:
    from adapters.runtime import run_worker
    from bench.app import BenchApp

    integration = HTTP if cfg.adapter == "http" else NOOP
    with fresh_store(cfg.backend, options) as database:
        env = worker_env(database, threads=cfg.egress_threads)
        settings = Settings(database_url=env["OPLEDGER_DATABASE_URL"], app=env["OPLEDGER_APP"],
                            worker_threads=cfg.egress_threads, poll_interval_seconds=0.05,
                            webhook_secret=SECRET)
        stop = threading.Event()
        # The worker owns the store (it takes the lock); the host commits from the same process.
        thread = threading.Thread(target=run_worker, args=(settings,), kwargs={"stop": stop}, daemon=True)
        thread.start()
        app = BenchApp(env=database.library_env(create_table=False))
        view = reader(database)
        try:
            time.sleep(0.5)
            began = time.perf_counter()
            produced = _produce(app, n, 1, integration, _target(cfg, partner_url))
            done = wait_until(lambda: settled_count(view) >= n, timeout=TIMEOUT_SECONDS,
                              what=f"{n} settled ({cfg})")
        finally:
            stop.set()
            thread.join(timeout=30)
            view.close()
            app.close()
    return done - began, {"producer_seconds": round(produced, 3), "producers": 1,
                          "note": "host and worker in one process"}


def producers_only(n: int, options: Options) -> float:
    """Diagnostic: the end-to-end producers with no worker running (one host transaction per
    intent, ``PRODUCERS`` threads, PostgreSQL): the ceiling an end-to-end run cannot pass."""
    with fresh_store("postgres", options) as database, writer(database) as app:
        return _produce(app, n, PRODUCERS, NOOP, None)


# ---------------------------------------------------------------------- baseline runs


def _queue_run(workers: int, n: int, options: Options, *, deferred_first: bool) -> tuple[float, dict]:
    """Procrastinate draining ``n`` no-op jobs with ``workers`` processes: deferred in one batch
    before the workers start (drain, timed from the first worker's ``READY``), or deferred one
    per transaction by ``PRODUCERS`` threads while they run (end to end, timed from the first
    defer). Returns the seconds until all succeeded, and (end to end) the CPU per job."""
    cpu: dict[str, float] = {}
    with queue.fresh_queue() as schema, queue.succeeded_counter(schema) as succeeded:
        if deferred_first:
            queue.defer_batch(schema, n)
        started = queue.start_workers(schema, workers, options)
        try:
            began = queue.wait_ready(started)
            if not deferred_first:
                time.sleep(0.5)
                meter = CpuMeter([worker.process.pid for worker in started])
                meter.start()
                began = time.perf_counter()
                queue.defer_each(schema, n, PRODUCERS)
            done = wait_until(lambda: succeeded() >= n, timeout=TIMEOUT_SECONDS,
                              what=f"{n} procrastinate jobs")
            if not deferred_first:
                cpu = meter.stop(n)
        finally:
            for worker in started:
                worker.kill()
    return done - began, cpu


def queue_drain(workers: int, n: int, options: Options) -> tuple[float, dict]:
    return _queue_run(workers, n, options, deferred_first=True)


def queue_e2e(workers: int, n: int, options: Options) -> tuple[float, dict]:
    return _queue_run(workers, n, options, deferred_first=False)


def queue_defer_only(n: int) -> float:
    """Diagnostic: Procrastinate's producers alone (``PRODUCERS`` threads, one job per
    transaction, no worker running)."""
    with queue.fresh_queue() as schema:
        began = time.perf_counter()
        queue.defer_each(schema, n, PRODUCERS)
        return time.perf_counter() - began


# ---------------------------------------------------------------------- the scenario


@contextmanager
def _partner(options: Options) -> Iterator[str]:
    from adapters.partner import start_partner_process

    with start_partner_process(log_path=options.workdir / f"partner-{uuid.uuid4().hex[:6]}.db",
                               secret=SECRET) as partner:
        yield partner.url


TARGETS = {
    ("drain", "postgres", 2): ("≥ 2,000 ops/s and ≥ 3x Procrastinate drain", 2000.0, 3.0),
    ("drain", "sqlite", 2): ("≥ 2,000 ops/s", 2000.0, None),
    ("e2e", "postgres", 2): ("≥ 3x Procrastinate end to end", None, 3.0),
    ("e2e", "sqlite", 2): ("≥ 1,000 ops/s", 1000.0, None),
}


def run(options: Options, log=print) -> list[Result]:
    n = options.size(2000, 40)
    small_n = min(n, options.size(400, 20))
    all_configs = configs(options)
    samples: dict[Config, list[float]] = {c: [] for c in all_configs}
    extras: dict[Config, dict] = {}
    cpu: dict[Config | tuple[str, int], list[dict]] = {}  # CPU per operation (end to end, PostgreSQL)
    baseline: dict[tuple[str, int], list[float]] = {(k, w): [] for k in ("drain", "e2e") for w in (1, 2)}
    ceilings: dict[str, list[float]] = {"e2e.producers_only": [], "procrastinate.defer_only": []}
    with ExitStack() as stack:
        partner_url = stack.enter_context(_partner(options))
        for rep in range(options.repetitions):
            # Interleaved: every configuration and its baseline once per repetition.
            for cfg in all_configs:
                size = small_n if cfg.small else n
                runner = drain if cfg.kind == "drain" else (e2e_postgres if cfg.backend == "postgres" else e2e_sqlite)
                seconds, extra = runner(cfg, size, options, partner_url)
                samples[cfg].append(rate(size, seconds))
                used = extra.pop("cpu_us_per_op", None)
                if used:
                    cpu.setdefault(cfg, []).append(used)
                extras[cfg] = {**extra, "n": size}
                log(f"  throughput rep {rep + 1}: {cfg.name:<16} {cfg.backend:<8} workers={cfg.workers} "
                    f"{rate(size, seconds):8.1f} ops/s{_cpu_text(used)}")
                if cfg.backend == "postgres" and cfg.adapter == "fake" and not cfg.small:
                    key = (cfg.kind, cfg.workers)
                    seconds, used = (queue_drain if cfg.kind == "drain" else queue_e2e)(cfg.workers, n, options)
                    baseline[key].append(rate(n, seconds))
                    if used:
                        cpu.setdefault(key, []).append(used)
                    log(f"  throughput rep {rep + 1}: procrastinate.{cfg.kind:<6} postgres workers={cfg.workers} "
                        f"{rate(n, seconds):8.1f} jobs/s{_cpu_text(used)}")
                if (cfg.kind, cfg.backend, cfg.workers, cfg.adapter, cfg.small) == ("e2e", "postgres", 2, "fake", False):
                    for name, seconds in (("e2e.producers_only", producers_only(n, options)),
                                          ("procrastinate.defer_only", queue_defer_only(n))):
                        ceilings[name].append(rate(n, seconds))
                        log(f"  throughput rep {rep + 1}: {name:<24} postgres {rate(n, seconds):8.1f} /s")
    results: list[Result] = []
    for (kind, workers), values in baseline.items():
        if values:
            results.append(Result(name=f"procrastinate.{kind}", backend="postgres", workers=workers,
                                  stats=Stats.of(values), unit="jobs/s", n=n,
                                  note=f"Procrastinate {_version()}, concurrency {queue.CONCURRENCY} per process",
                                  extra=_cpu_extra(cpu.get((kind, workers)))))
    for name, values in ceilings.items():
        if values:
            results.append(Result(
                name=name, backend="postgres", workers=0, stats=Stats.of(values),
                unit="jobs/s" if name.startswith("procrastinate") else "ops/s", n=n,
                note=f"diagnostic: {PRODUCERS} producer threads, one transaction each, no worker running: "
                     "the ceiling of the end-to-end row"))
    for cfg in all_configs:
        stats = Stats.of(samples[cfg])
        base = baseline.get((cfg.kind, cfg.workers)) if cfg.adapter == "fake" and not cfg.small else None
        ratio = stats.median / Stats.of(base).median if base else None
        result = Result(name=cfg.name, backend=cfg.backend, workers=cfg.workers, stats=stats, unit="ops/s",
                        ratio=ratio, baseline=f"procrastinate.{cfg.kind}" if ratio else None,
                        n=extras[cfg].pop("n"), extra={**extras[cfg], "processes": cfg.processes,
                                                       "egress_threads": cfg.egress_threads,
                                                       **_cpu_extra(cpu.get(cfg))})
        target = TARGETS.get((cfg.kind, cfg.backend, cfg.workers)) if cfg.adapter == "fake" and not cfg.small else None
        if target:
            text, floor, times = target
            result.target = text
            result.met = (floor is None or stats.median >= floor) and (times is None or (ratio or 0) >= times)
        if cfg.backend == "sqlite" and cfg.workers == 2:
            result.note = "one process (SQLite has one owner), more egress threads"
        results.append(result)
    return results


def _cpu_text(used: dict | None) -> str:
    return ("  CPU µs/op: " + ", ".join(f"{key} {value:.0f}" for key, value in used.items())) if used else ""


def _cpu_extra(runs: list[dict] | None) -> dict:
    """``{"cpu_us_per_op": the repetition with the median total}``, or nothing."""
    return {"cpu_us_per_op": median_run(runs)} if runs else {}


def _version() -> str:
    from importlib.metadata import version

    return version("procrastinate")
