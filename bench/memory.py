"""Memory: peak RSS of a worker process with 10k vs. 200k pending operations.

For each size one store is seeded and projected; then, per repetition, one worker process
(the product's ``opledger worker`` via ``spawn_worker``) starts, settles K operations, and its
peak resident set (``VmHWM`` in ``/proc/PID/status``, the kernel's high-water mark; psutil's
RSS as a fallback) is read before it is killed. Each repetition leaves K fewer pending.
"""

from __future__ import annotations

from pathlib import Path

from bench import harness

TARGET_GROWTH = 0.10


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set size, MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


def run(options: harness.Options, log=print) -> list[harness.Result]:
    small, large = (200, 2_000) if options.smoke else (10_000, 200_000)
    settle = 50 if options.smoke else 2_000
    results: list[harness.Result] = []
    for backend in ("postgres", "sqlite"):
        medians = {}
        for pending in (small, large):
            samples = []
            with harness.fresh_store(backend, options) as database:
                projected = harness.seed_pending(database, pending)
                log(f"  memory {backend}: seeded and projected {pending:,} pending ({projected:.1f} s to project)")
                view = harness.reader(database)
                try:
                    for rep in range(options.repetitions):
                        target = harness.settled_count(view) + settle
                        workers = harness.start_workers(1, harness.worker_env(database), options,
                                                f"memory-{backend}-{pending}")
                        try:
                            harness.wait_ready(workers)
                            harness.wait_until(lambda: harness.settled_count(view) >= target, timeout=600,
                                       what=f"{settle} settled", workers=workers)
                            samples.append(peak_rss_mib(workers[0].pid))
                        finally:
                            harness.stop_workers(workers)
                        log(f"  memory rep {rep + 1} {backend} {pending:,} pending: peak RSS {samples[-1]:.1f} MiB")
                finally:
                    view.close()
            stats = harness.Stats.of(samples)
            medians[pending] = stats.median
            result = harness.Result(name=f"memory.peak_rss.{pending // 1000}k" if pending >= 1000 else f"memory.peak_rss.{pending}",
                            backend=backend, workers=1, stats=stats, unit="MiB", n=pending,
                            extra={"pending": pending, "settled_per_run": settle})
            if pending == large:
                growth = stats.median / medians[small] - 1
                result.ratio = stats.median / medians[small]
                result.baseline = results[-1].name
                result.target = f"≤ +10 % over {small:,} pending"
                result.met = growth <= TARGET_GROWTH
                result.extra["growth"] = round(growth, 4)
            results.append(result)
    return results
