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

Workers run with the default settings (``OPLEDGER_WORKER_THREADS`` unset: 256 egress threads for
the instant in-process adapter, which blocks; the webhook adapter's calls need no thread and are
bounded by 2,048 slots, 1,024 per target host, ADR 0009). "2 workers" on SQLite is one process
with twice the egress threads (512).

**Latency rows** (``drain.fast``, ``drain.fast-100ms``): the webhook adapter against
``bench.fast_partner``, which keeps no log and answers after a fixed delay (0 or 100 ms), so the
ratio of the two shows how much of a provider's latency the egress hides with the defaults.

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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from bench import procrastinate_baseline as queue
from bench.app import HTTP, NOOP
from bench.fast_partner import fast_partner
from bench.harness import (
    POLL_SECONDS,
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
from bench.wire import BARE_CONCURRENCY, BareRun, bare_client, bare_result, judge_wire, nginx_partner
from ledger.config import Database, Settings

SQLITE_TWO_WORKER_SLOTS = 512
"""Egress threads of the SQLite "2 workers" rows: one process (one owner), twice the default."""
LATENCY_SECONDS = 0.1
"""The slow fast partner's added latency: real providers answer in tens to hundreds of ms."""
LATENCY_TARGET = 0.8
"""The latency rows' target: a 100 ms provider drains at least this share of an instant one."""
SUFFIXES = {"fake": "", "http": ".http", "fast": ".fast", "slow": ".fast-100ms", "wire": ".wire"}
PRODUCERS = 2
WIRE_ROWS = (("postgres", 2), ("sqlite", 1))
"""The (backend, workers) of the ``drain.wire`` rows, each beside a ``client.bare`` of as many
processes and the ``drain`` row of the same shape (issue 30's acceptance)."""
TIMEOUT_SECONDS = 900.0
PARTNER_PATH = "/bench"


@dataclass(frozen=True)
class Config:
    """One opledger throughput configuration."""

    kind: str  # "drain" or "e2e"
    backend: str
    workers: int
    # "fake": in-process, instant; "http": the reference partner (durable log); "fast" and
    # "slow": bench.fast_partner answering at once or after LATENCY_SECONDS; "wire": nginx
    # answering 200 {} (bench.wire), next to nothing per request
    adapter: str = "fake"

    @property
    def name(self) -> str:
        return f"{self.kind}{SUFFIXES[self.adapter]}"

    @property
    def egress_threads(self) -> int | None:
        """Egress threads (``OPLEDGER_WORKER_THREADS``), or None for the default settings."""
        return SQLITE_TWO_WORKER_SLOTS if self.backend == "sqlite" and self.workers == 2 else None

    @property
    def processes(self) -> int:
        return 1 if self.backend == "sqlite" else self.workers


def configs(options: Options) -> list[Config]:
    latency = [Config("drain", backend, workers, adapter=adapter)
               for backend, workers in (("postgres", 2), ("sqlite", 1)) for adapter in ("fast", "slow")]
    wire = [Config("drain", backend, workers, adapter="wire") for backend, workers in WIRE_ROWS]
    if options.smoke:  # every kind once, the target rows only, to stay well under a minute
        return [Config(kind, backend, 2) for kind in ("drain", "e2e") for backend in ("postgres", "sqlite")] + [
            Config("drain", "postgres", 2, adapter="http")] + latency[:2] + wire[:1]
    found = [Config(kind, backend, w) for kind in ("drain", "e2e") for backend in ("postgres", "sqlite") for w in (1, 2)]
    found += [Config("drain", "postgres", 2, adapter="http"), Config("drain", "sqlite", 1, adapter="http"),
              Config("e2e", "postgres", 2, adapter="http")]
    return found + latency + wire


# ---------------------------------------------------------------------- opledger runs


def _target(cfg: Config, partners: dict[str, str]) -> str | None:
    return f"{partners[cfg.adapter]}{PARTNER_PATH}" if cfg.adapter in partners else None


def _integration(cfg: Config) -> str:
    return NOOP if cfg.adapter == "fake" else HTTP


def drain(cfg: Config, n: int, options: Options, partners: dict[str, str]) -> tuple[float, dict]:
    """One drain run; returns (seconds, extra facts)."""
    integration = _integration(cfg)
    with fresh_store(cfg.backend, options) as database:
        seed_pending(database, n, integration=integration, target=_target(cfg, partners))
        view = reader(database)
        workers = start_workers(cfg.processes, worker_env(database, threads=cfg.egress_threads), options,
                                f"{cfg.name}-{cfg.backend}")
        try:
            began = wait_ready(workers)
            meter = CpuMeter([worker.pid for worker in workers])
            meter.start()
            done = wait_until(lambda: settled_count(view) >= n, timeout=TIMEOUT_SECONDS,
                              what=f"{n} settled ({cfg})", workers=workers)
            cpu = meter.stop(n)
        finally:
            stop_workers(workers)
            view.close()
    return done - began, {"cpu_us_per_op": cpu}


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


def e2e(cfg: Config, n: int, options: Options, partners: dict[str, str],
        poll: float = POLL_SECONDS) -> tuple[float, dict]:
    """One end-to-end run on a fresh, empty store of ``cfg.backend``; returns (seconds, extra)."""
    run = e2e_postgres_on if cfg.backend == "postgres" else e2e_sqlite_on
    with fresh_store(cfg.backend, options) as database:
        return run(database, cfg, n, options, partners, poll=poll)


def e2e_postgres_on(database: Database, cfg: Config, n: int, options: Options,
                    partners: dict[str, str], *, poll: float = POLL_SECONDS) -> tuple[float, dict]:
    """One end-to-end run on ``database`` (empty or preloaded: it waits for ``n`` more settled
    than there were, reading the view's counts every ``poll`` seconds: a ``GROUP BY`` over
    every row, so a big store wants a longer one); returns (seconds, extra facts)."""
    integration = _integration(cfg)
    view = reader(database)
    base = settled_count(view)
    spawned = time.perf_counter()
    workers = start_workers(cfg.processes, worker_env(database, threads=cfg.egress_threads), options,
                            f"{cfg.name}-{cfg.backend}")
    try:
        wait_ready(workers)
        started = time.perf_counter() - spawned  # every worker ready: its store checks done
        time.sleep(0.5)  # let the projection leader settle in
        meter = CpuMeter([worker.pid for worker in workers])
        with writer(database) as app:
            meter.start()
            began = time.perf_counter()
            produced = _produce(app, n, PRODUCERS, integration, _target(cfg, partners))
            done = wait_until(lambda: settled_count(view) >= base + n, timeout=TIMEOUT_SECONDS,
                              what=f"{n} settled ({cfg})", workers=workers, interval=poll)
            cpu = meter.stop(n)
    finally:
        stop_workers(workers)
        view.close()
    return done - began, {"producer_seconds": round(produced, 3), "producers": PRODUCERS, "cpu_us_per_op": cpu,
                          "start_seconds": round(started, 3)}


def e2e_sqlite_on(database: Database, cfg: Config, n: int, options: Options,
                  partners: dict[str, str], *, poll: float = POLL_SECONDS) -> tuple[float, dict]:
    """As :func:`e2e_postgres_on`, with host and worker in this process (SQLite's one writer)."""
    from adapters.runtime import run_worker
    from bench.app import BenchApp

    integration = _integration(cfg)
    env = worker_env(database, threads=cfg.egress_threads)
    slots = {"worker_threads": cfg.egress_threads} if cfg.egress_threads else {}  # else the default
    settings = Settings(database_url=env["OPLEDGER_DATABASE_URL"], app=env["OPLEDGER_APP"],
                        poll_interval_seconds=0.05, webhook_secret=SECRET, **slots)
    stop, ready = threading.Event(), threading.Event()

    def mark_ready(_store: Any, _stop: threading.Event) -> list[threading.Thread]:
        ready.set()  # run_worker calls this once its store checks are done and the worker is built
        return []

    # The worker owns the store (it takes the lock); the host commits from the same process.
    spawned = time.perf_counter()
    thread = threading.Thread(target=run_worker, args=(settings,), kwargs={"stop": stop, "beside": mark_ready},
                              daemon=True)
    thread.start()
    app = BenchApp(env=database.library_env(create_table=False))
    view = reader(database)
    base = settled_count(view)
    try:
        # Timed from a ready worker, as e2e_postgres_on waits for its workers: the start (the
        # store's checks, which read the whole file) is reported apart as start_seconds.
        while not ready.wait(0.05):
            if not thread.is_alive():
                raise RuntimeError("the worker thread exited before it was ready; see its log above")
        started = time.perf_counter() - spawned
        time.sleep(0.5)
        began = time.perf_counter()
        produced = _produce(app, n, 1, integration, _target(cfg, partners))
        done = wait_until(lambda: settled_count(view) >= base + n, timeout=TIMEOUT_SECONDS,
                          what=f"{n} settled ({cfg})", interval=poll)
    finally:
        stop.set()
        thread.join(timeout=30)
        view.close()
        app.close()
    return done - began, {"producer_seconds": round(produced, 3), "producers": 1,
                          "note": "host and worker in one process", "start_seconds": round(started, 3)}


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


def run(options: Options, log=print, *, select: Callable[[Config], bool] | None = None) -> list[Result]:
    """The throughput rows (``select``: only the configurations it accepts), interleaved."""
    n = options.size(2000, 40)
    all_configs = [cfg for cfg in configs(options) if select is None or select(cfg)]
    samples: dict[Config, list[float]] = {c: [] for c in all_configs}
    extras: dict[Config, dict] = {}
    cpu: dict[Config | tuple[str, int], list[dict]] = {}  # CPU per operation (end to end, PostgreSQL)
    baseline: dict[tuple[str, int], list[float]] = {(k, w): [] for k in ("drain", "e2e") for w in (1, 2)}
    ceilings: dict[str, list[float]] = {"e2e.producers_only": [], "procrastinate.defer_only": []}
    bare: dict[Config, list[BareRun]] = {}  # the wire rows' bare client runs (bench.wire)
    with ExitStack() as stack:
        partners = {"http": stack.enter_context(_partner(options)),
                    "fast": stack.enter_context(fast_partner(0.0)),
                    "slow": stack.enter_context(fast_partner(LATENCY_SECONDS))}
        nginx = stack.enter_context(nginx_partner())
        if nginx is None:  # the wire rows say so; they never run against another partner
            log("  throughput: nginx is not installed (apt-get install nginx): drain.wire and client.bare skipped")
            all_configs = [cfg for cfg in all_configs if cfg.adapter != "wire"]
        else:
            partners["wire"] = nginx
        for rep in range(options.repetitions):
            # Interleaved: every configuration and its baseline once per repetition.
            for cfg in all_configs:
                if cfg.adapter == "wire":  # the ceiling first, against the same nginx
                    run = bare_client(f"{partners['wire']}{PARTNER_PATH}", n, concurrency=BARE_CONCURRENCY,
                                      processes=cfg.processes, secret=SECRET)
                    bare.setdefault(cfg, []).append(run)
                    log(f"  throughput rep {rep + 1}: client.bare       {cfg.backend:<8} processes={cfg.processes} "
                        f"{rate(run.requests, run.seconds):8.1f} requests/s  CPU µs/call {run.cpu_us_per_call:.0f}"
                        + (f"  ({run.errors} errors)" if run.errors else ""))
                size = n
                runner = drain if cfg.kind == "drain" else e2e
                seconds, extra = runner(cfg, size, options, partners)
                samples[cfg].append(rate(size, seconds))
                used = extra.pop("cpu_us_per_op", None)
                if used:
                    cpu.setdefault(cfg, []).append(used)
                extras[cfg] = {**extra, "n": size}
                log(f"  throughput rep {rep + 1}: {cfg.name:<16} {cfg.backend:<8} workers={cfg.workers} "
                    f"{rate(size, seconds):8.1f} ops/s{_cpu_text(used)}")
                if cfg.backend == "postgres" and cfg.adapter == "fake":
                    key = (cfg.kind, cfg.workers)
                    seconds, used = (queue_drain if cfg.kind == "drain" else queue_e2e)(cfg.workers, n, options)
                    baseline[key].append(rate(n, seconds))
                    if used:
                        cpu.setdefault(key, []).append(used)
                    log(f"  throughput rep {rep + 1}: procrastinate.{cfg.kind:<6} postgres workers={cfg.workers} "
                        f"{rate(n, seconds):8.1f} jobs/s{_cpu_text(used)}")
                if (cfg.kind, cfg.backend, cfg.workers, cfg.adapter) == ("e2e", "postgres", 2, "fake"):
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
    results += [bare_result(cfg.backend, cfg.workers, cfg.processes, runs, n) for cfg, runs in bare.items()]
    for cfg in all_configs:
        stats = Stats.of(samples[cfg])
        ratio, baseline_name = None, None
        if cfg.adapter == "fake" and cfg.backend == "postgres":  # the baseline runs on PostgreSQL only
            base = baseline.get((cfg.kind, cfg.workers))
            ratio = stats.median / Stats.of(base).median if base else None
            baseline_name = f"procrastinate.{cfg.kind}" if ratio else None
        elif cfg.adapter == "slow":  # the latency row: against the same drain with an instant partner
            fast = samples.get(Config(cfg.kind, cfg.backend, cfg.workers, adapter="fast"))
            ratio = stats.median / Stats.of(fast).median if fast else None
            baseline_name = f"{cfg.kind}.fast" if ratio else None
        result = Result(name=cfg.name, backend=cfg.backend, workers=cfg.workers, stats=stats, unit="ops/s",
                        ratio=ratio, baseline=baseline_name,
                        n=extras[cfg].pop("n"), extra={**extras[cfg], "processes": cfg.processes,
                                                       "egress_threads": cfg.egress_threads or "default",
                                                       **_cpu_extra(cpu.get(cfg))})
        target = TARGETS.get((cfg.kind, cfg.backend, cfg.workers)) if cfg.adapter == "fake" else None
        if target:
            text, floor, times = target
            result.target = text
            result.met = (floor is None or stats.median >= floor) and (times is None or (ratio or 0) >= times)
        elif cfg.adapter == "slow":
            result.target = f"≥ {LATENCY_TARGET}x the instant partner's drain, default settings"
            result.met = (ratio or 0) >= LATENCY_TARGET
            result.note = f"bench.fast_partner, {LATENCY_SECONDS * 1000:.0f} ms per answer, no log"
        elif cfg.adapter == "fast":
            result.note = "bench.fast_partner, instant, no log"
        elif cfg.adapter == "wire":
            judge_wire(result, samples.get(Config("drain", cfg.backend, cfg.workers), []), bare.get(cfg, []))
        if cfg.backend == "sqlite" and cfg.workers == 2:
            result.note = "one process (SQLite has one owner), more egress threads"
        results.append(result)
    return results


def run_wire(options: Options, log=print) -> list[Result]:
    """``python -m bench --only wire``: issue 30's rows alone, ``drain.wire`` and ``client.bare``
    beside the drains they are judged against (the instant in-process ``drain`` of the same
    shape, with Procrastinate's on PostgreSQL) and the latency rows (``drain.fast``,
    ``drain.fast-100ms``), interleaved as in the whole scenario."""
    shapes = set(WIRE_ROWS)
    return run(options, log, select=lambda cfg: cfg.kind == "drain" and (
        cfg.adapter in ("wire", "fast", "slow") or (cfg.adapter == "fake" and (cfg.backend, cfg.workers) in shapes)))


def _cpu_text(used: dict | None) -> str:
    return ("  CPU µs/op: " + ", ".join(f"{key} {value:.0f}" for key, value in used.items())) if used else ""


def _cpu_extra(runs: list[dict] | None) -> dict:
    """``{"cpu_us_per_op": the repetition with the median total}``, or nothing."""
    return {"cpu_us_per_op": median_run(runs)} if runs else {}


def _version() -> str:
    from importlib.metadata import version

    return version("procrastinate")
