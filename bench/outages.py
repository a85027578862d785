"""Outages and pickup latency on PostgreSQL (issue 17).

**Drain through outages** (``drain.outages``): the throughput scenario's drain (2 worker
processes, N no-op operations seeded first), with every backend of both workers terminated
(``pg_terminate_backend``, by their ``application_name``) every 2 s while it runs; the ratio is
to the clean drain run beside it (``drain.clean``). Every operation must still settle.

**Pickup latency** (``pickup``): workers running and idle; the host commits one intent every
5 ms (200 a second) for N intents; the latency of each is its ``AttemptStarted`` time minus its
``Intended`` time (both recorded in the events). The baseline is Procrastinate, which LISTENs,
deferring no-op jobs at the same pace: its ``started`` event time minus its ``deferred`` event
time (``procrastinate_events``). Target: opledger's p99 at most 2x Procrastinate's.
"""

from __future__ import annotations

import signal
import statistics
import threading
import time
import uuid

import psycopg

from bench import procrastinate_baseline as queue
from bench.harness import (
    PG_URL,
    Options,
    Result,
    Stats,
    fresh_store,
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
from ledger.config import Database
from ledger.operation import Operation

KILL_EVERY_SECONDS = 2.0
PACE_SECONDS = 0.005
"""One intent (or job) every 5 ms: 200 a second."""
TIMEOUT_SECONDS = 600.0
POLL_MS = 50.0
"""The bench workers' poll interval (``bench.harness.worker_env``), ms."""
SMOKE_LEASE_SECONDS = 3.0
"""The lease at smoke size: the killed worker's operations would otherwise hold the run (and CI)
for the default's 30 s."""


def _terminate(tag: str) -> int:
    with psycopg.connect(Database.parse(PG_URL).conninfo(), autocommit=True) as conn:
        row = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE application_name = %s", (tag,)).fetchone()
    return int(row[0]) if row else 0


def drain(n: int, options: Options, *, outages: bool) -> tuple[float, int]:
    """One 2-worker drain of ``n`` no-op operations; returns (ops/s, terminations)."""
    tag = f"opledger-bench-{uuid.uuid4().hex[:8]}"
    with fresh_store("postgres", options) as database:
        seed_pending(database, n)
        view = reader(database)
        workers = start_workers(2, {**worker_env(database), "PGAPPNAME": tag}, options, "drain-outages")
        stop, kills = threading.Event(), [0]

        def killer() -> None:
            while not stop.wait(KILL_EVERY_SECONDS):
                kills[0] += _terminate(tag) > 0

        try:
            began = wait_ready(workers)
            if outages:
                threading.Thread(target=killer, daemon=True).start()
            done = wait_until(lambda: settled_count(view) >= n, timeout=TIMEOUT_SECONDS,
                              what=f"{n} settled (outages={outages})", workers=workers)
        finally:
            stop.set()
            stop_workers(workers)
            view.close()
    return rate(n, done - began), kills[0]


def _percentiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[98]


def pickup(n: int, options: Options, *, kill_at: int | None = None) -> tuple[list[float], list[float]]:
    """Seconds from each intent's ``Intended`` to its first ``AttemptStarted``, at 200/s.

    With ``kill_at``, the first worker is SIGKILLed just before intent ``kill_at`` is written.

    Returns:
        The latencies of the operations the killed worker never claimed first, and of those it
        did (empty without ``kill_at``).
    """
    with fresh_store("postgres", options) as database:
        env = worker_env(database, lease_seconds=SMOKE_LEASE_SECONDS) if options.smoke else worker_env(database)
        workers = start_workers(2, env, options, "pickup")
        view = reader(database)
        try:
            wait_ready(workers)
            time.sleep(0.5)
            killed = f":{workers[0].process.pid}:"
            with writer(database) as app:
                ids, began = [], time.perf_counter()
                for i in range(n):
                    if i == kill_at:
                        workers[0].process.send_signal(signal.SIGKILL)
                    ids.append(app.create_with_intent(i))
                    time.sleep(max(0.0, began + (i + 1) * PACE_SECONDS - time.perf_counter()))
                wait_until(lambda: settled_count(view) >= n, timeout=TIMEOUT_SECONDS, what="pickup run",
                           workers=workers[1:] if kill_at is not None else workers)
                others: list[float] = []
                theirs: list[float] = []
                for op_id in ids:
                    events = list(app.repository.event_store.get(op_id))
                    claimed = next(e for e in events if isinstance(e, Operation.Claimed))
                    started = next(e for e in events if isinstance(e, Operation.AttemptStarted))
                    latency = (started.timestamp - events[0].timestamp).total_seconds()
                    (theirs if kill_at is not None and killed in claimed.worker_id else others).append(latency)
                return others, theirs
        finally:
            stop_workers(workers)
            view.close()


def queue_pickup(n: int, options: Options) -> list[float]:
    """Procrastinate: seconds from each job's ``deferred`` to its ``started`` event, at 200/s."""
    with queue.fresh_queue() as schema, queue.succeeded_counter(schema) as succeeded:
        started = queue.start_workers(schema, 2, options)
        try:
            queue.wait_ready(started)
            time.sleep(0.5)
            app = queue.make_app(schema)
            with app.open():
                task = app.tasks[queue.TASK_NAME]
                began = time.perf_counter()
                for i in range(n):
                    task.defer(n=i)
                    time.sleep(max(0.0, began + (i + 1) * PACE_SECONDS - time.perf_counter()))
            wait_until(lambda: succeeded() >= n, timeout=TIMEOUT_SECONDS, what="procrastinate pickup")
        finally:
            for worker in started:
                worker.kill()
        with psycopg.connect(Database.parse(PG_URL).conninfo(), autocommit=True) as conn:
            rows = conn.execute(
                f'SELECT EXTRACT(EPOCH FROM (s.at - d.at)) FROM "{schema}".procrastinate_events d '
                f'JOIN "{schema}".procrastinate_events s ON s.job_id = d.job_id '
                "WHERE d.type = 'deferred' AND s.type = 'started'").fetchall()
        return [float(seconds) for (seconds,) in rows]


def run(options: Options, log=print) -> list[Result]:
    n = options.size(15000, 40)  # several seconds at ~3,000 ops/s: a 2,000-operation drain ended before the first kill
    paced = options.size(1000, 40)
    clean: list[float] = []
    broken: list[float] = []
    p50s: dict[str, list[float]] = {"opledger": [], "procrastinate": []}
    p99s: dict[str, list[float]] = {"opledger": [], "procrastinate": []}
    after_kill: dict[str, list[float]] = {"others": [], "killed": []}
    for rep in range(options.repetitions):
        clean.append(drain(n, options, outages=False)[0])
        ops, kills = drain(n, options, outages=True)
        broken.append(ops)
        log(f"  outages rep {rep + 1}: clean {clean[-1]:8.1f} ops/s, with {kills} terminations {ops:8.1f} ops/s")
        for name, measure in (("opledger", lambda: pickup(paced, options)[0]),
                              ("procrastinate", lambda: queue_pickup(paced, options))):
            p50, p99 = _percentiles(measure())
            p50s[name].append(p50 * 1000)
            p99s[name].append(p99 * 1000)
            log(f"  outages rep {rep + 1}: pickup {name:<13} p50 {p50 * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms")
        others, theirs = pickup(paced, options, kill_at=paced // 2)
        after_kill["others"].append(max(others) * 1000)
        after_kill["killed"].append(max(theirs, default=0.0) * 1000)
        log(f"  outages rep {rep + 1}: a worker SIGKILLed mid-run: longest pickup {after_kill['others'][-1]:7.1f} ms "
            f"(its own operations: {after_kill['killed'][-1]:7.1f} ms)")
    clean_stats, broken_stats = Stats.of(clean), Stats.of(broken)
    others_stats = Stats.of(after_kill["others"])
    ours, theirs = Stats.of(p99s["opledger"]), Stats.of(p99s["procrastinate"])
    return [
        Result(name="drain.clean", backend="postgres", workers=2, stats=clean_stats, unit="ops/s", n=n),
        Result(name="drain.outages", backend="postgres", workers=2, stats=broken_stats, unit="ops/s", n=n,
               ratio=broken_stats.median / clean_stats.median, baseline="drain.clean",
               note=f"every backend of both workers terminated every {KILL_EVERY_SECONDS:g} s"),
        Result(name="pickup.p50", backend="postgres", workers=2, stats=Stats.of(p50s["opledger"]), unit="ms",
               n=paced, ratio=statistics.median(p50s["opledger"]) / statistics.median(p50s["procrastinate"]),
               baseline="procrastinate.pickup.p50", note="intent committed -> AttemptStarted, 200/s"),
        Result(name="pickup.p99", backend="postgres", workers=2, stats=ours, unit="ms", n=paced,
               ratio=ours.median / theirs.median, baseline="procrastinate.pickup.p99",
               target="≤ 2x Procrastinate's p99 (lower is better)", met=ours.median <= 2 * theirs.median),
        Result(name="procrastinate.pickup.p50", backend="postgres", workers=2, stats=Stats.of(p50s["procrastinate"]),
               unit="ms", n=paced, note="deferred -> started, 200/s"),
        Result(name="procrastinate.pickup.p99", backend="postgres", workers=2, stats=theirs, unit="ms", n=paced),
        Result(name="pickup.after_kill.max", backend="postgres", workers=2, stats=others_stats, unit="ms", n=paced,
               target=f"≤ one poll interval ({POLL_MS:.0f} ms) + 100 ms, for operations the killed worker never held",
               met=others_stats.median <= POLL_MS + 100,
               note="the longest pickup after one of two workers was SIGKILLed mid-run"),
        Result(name="pickup.after_kill.killed_worker.max", backend="postgres", workers=2,
               stats=Stats.of(after_kill["killed"]), unit="ms", n=paced,
               note="the killed worker's own operations: they wait for its lease (30 s; 3 s at smoke size) to expire"),
    ]
