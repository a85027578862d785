"""Recovery: SIGKILL every worker with 1,000 operations in flight, start new ones, time until
all are settled, next to the configured lease TTL.

1,000 items with intents are committed and projected; workers start (instant adapter) and, as
soon as the first ``Claimed`` is in the log, every worker is SIGKILLed, so the operations they
held stay claimed or dispatching under live leases and the rest are pending. New workers start
at once; the time runs from the kill until the projection shows all settled. The operations
that were held must wait for their lease to expire before they can be reclaimed (epoch 2), so
the floor is the lease TTL; the target is TTL + 5 s.
"""

from __future__ import annotations

import time

from eventsourcing.utils import get_topic

from bench.harness import (
    Options,
    Result,
    Stats,
    fresh_store,
    reader,
    seed_pending,
    settled_count,
    start_workers,
    stop_workers,
    wait_until,
    worker_env,
)
from ledger.operation import Operation

LEASE_SECONDS = 5.0
SMOKE_LEASE_SECONDS = 1.0
MARGIN_SECONDS = 5.0


def _count(app, topic: str) -> int:
    position, total = 0, 0
    while batch := app.recorder.select_notifications(start=position + 1, limit=10_000, topics=[topic]):
        total += len(batch)
        position = batch[-1].id
    return total


def once(backend: str, n: int, lease: float, options: Options) -> tuple[float, dict]:
    from bench.app import BenchApp

    with fresh_store(backend, options) as database:
        seed_pending(database, n)
        view = reader(database)
        env = worker_env(database, lease_seconds=lease)
        count = 2 if backend == "postgres" else 1
        app = BenchApp(env=database.library_env(create_table=False, read_only=backend == "sqlite"))
        claimed = get_topic(Operation.Claimed)
        try:
            first = start_workers(count, env, options, f"recovery-{backend}-a")
            # No waiting for every worker to be ready: the first one would drain work meanwhile.
            wait_until(lambda: app.recorder.select_notifications(start=1, limit=1, topics=[claimed]),
                       timeout=60, what="a first claim", workers=first, interval=0.002)
            for worker in first:  # SIGKILL all at once, then reap
                worker.process.kill()
            killed = time.perf_counter()
            stop_workers(first)
            settled_at_kill = _count(app, get_topic(Operation.Settled))
            claims_at_kill = _count(app, claimed)
            second = start_workers(count, env, options, f"recovery-{backend}-b")
            try:
                done = wait_until(lambda: settled_count(view) >= n, timeout=lease + 300,
                                  what=f"{n} settled after the kill", workers=second)
            finally:
                stop_workers(second)
            rows = view.list(limit=n + 10)
            reclaimed = sum(1 for r in rows if r.epoch >= 2)
        finally:
            view.close()
            app.close()
    return done - killed, {"unsettled_at_kill": n - settled_at_kill, "claims_at_kill": claims_at_kill,
                           "reclaimed_after_lease_expiry": reclaimed}


def run(options: Options, log=print) -> list[Result]:
    n = options.size(1000, 200) if options.n is None else options.n
    lease = SMOKE_LEASE_SECONDS if options.smoke else LEASE_SECONDS
    results = []
    for backend in ("postgres", "sqlite"):
        samples, facts = [], []
        for rep in range(options.repetitions):
            seconds, extra = once(backend, n, lease, options)
            samples.append(seconds)
            facts.append(extra)
            log(f"  recovery rep {rep + 1} {backend}: {seconds:.2f} s (lease {lease:g} s) {extra}")
        stats = Stats.of(samples)
        results.append(Result(
            name="recovery", backend=backend, workers=2 if backend == "postgres" else 1, stats=stats, unit="s",
            n=n, target=f"≤ lease TTL + {MARGIN_SECONDS:g} s ({lease + MARGIN_SECONDS:g} s)",
            met=stats.median <= lease + MARGIN_SECONDS,
            extra={"lease_seconds": lease, "runs": facts},
            note="time from SIGKILL of every worker to all settled, new workers started at once"))
    return results
