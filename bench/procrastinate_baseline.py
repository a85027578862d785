"""The baseline: Procrastinate deferring and draining no-op jobs on the same PostgreSQL.

Procrastinate (a bench-only dependency) is a PostgreSQL task queue: one row per job, claimed
with ``SELECT ... FOR UPDATE SKIP LOCKED`` by a stored procedure. It runs in its own schema
(``procrastinate_<random>``) of the same database as opledger's store, with worker processes
started the same way (a child Python process per worker, concurrency 4 each), and finished jobs
kept (``delete_jobs="never"``, its default), so both systems do comparable bookkeeping.

Worker entry (used by :func:`start_workers`)::

    python -m bench.procrastinate_baseline worker --schema S --concurrency 4
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import harness
from bench.harness import PG_URL, REPO, Options, drop_schema
from ledger.config import Database

CONCURRENCY = 4
"""Worker concurrency the targets name ("at least 3x Procrastinate's drain rate (worker concurrency 4)")."""
DEFER_CHUNK = 1000
TASK_NAME = "bench_noop"


def noop(n: int) -> None:
    """The job: does nothing (the queue's own cost is what is measured)."""


def make_app(schema: str):  # -> procrastinate.App
    """A Procrastinate app on ``schema`` of the benchmark database, with the no-op task."""
    import procrastinate

    conninfo = Database.parse(PG_URL).conninfo()
    connector = procrastinate.PsycopgConnector(conninfo=conninfo, kwargs={"options": f"-c search_path={schema}"},
                                               min_size=1, max_size=8)
    app = procrastinate.App(connector=connector)
    app.task(name=TASK_NAME)(noop)
    return app


@contextmanager
def fresh_queue() -> Iterator[str]:
    """A new schema with Procrastinate's tables; dropped afterwards. Yields the schema name."""
    import psycopg

    schema = f"procrastinate_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(Database.parse(PG_URL).conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        app = make_app(schema)
        with app.open():
            app.schema_manager.apply_schema()
        yield schema
    finally:
        drop_schema(schema)


def defer_batch(schema: str, count: int) -> None:
    """Defer ``count`` jobs in chunks (setup for the drain run; never timed)."""
    app = make_app(schema)
    with app.open():
        task = app.tasks[TASK_NAME]
        for start in range(0, count, DEFER_CHUNK):
            task.batch_defer(*({"n": n} for n in range(start, min(count, start + DEFER_CHUNK))))


def defer_each(schema: str, count: int, producers: int) -> None:
    """Defer ``count`` jobs, one transaction each, from ``producers`` threads (end to end)."""
    app = make_app(schema)
    with app.open():
        task = app.tasks[TASK_NAME]

        def produce(offset: int) -> None:
            for n in range(offset, count, producers):
                task.defer(n=n)

        with ThreadPoolExecutor(producers) as pool:
            list(pool.map(produce, range(producers)))


@contextmanager
def succeeded_counter(schema: str) -> Iterator[Callable[[], int]]:
    """Yields a function that counts the jobs that succeeded, over one connection held open, as
    the opledger runs poll their status view. (A new connection per poll cost the machine about
    8 ms of CPU each, which slowed the baseline and was counted against it.)"""
    import psycopg

    sql = f"SELECT count(*) FROM \"{schema}\".procrastinate_jobs WHERE status = 'succeeded'"
    with psycopg.connect(Database.parse(PG_URL).conninfo(), autocommit=True) as conn:
        yield lambda: int(conn.execute(sql).fetchone()[0])


@dataclass
class QueueWorker:
    process: subprocess.Popen[bytes]
    log_path: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait()


def start_workers(schema: str, count: int, options: Options) -> list[QueueWorker]:
    """Spawn ``count`` Procrastinate worker processes (concurrency 4 each)."""
    logs = options.workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    started = []
    for i in range(count):
        path = logs / f"procrastinate-{schema}-{i}.log"
        with open(path, "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "bench.procrastinate_baseline", "worker", "--schema", schema,
                 "--concurrency", str(CONCURRENCY), "--name", f"w{i}"],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        started.append(QueueWorker(process, path))
    return started


def wait_ready(workers: list[QueueWorker], timeout: float = 60.0) -> float:
    """Wait until every Procrastinate worker printed READY; returns ``perf_counter`` when the first did."""
    return harness.wait_ready(workers, timeout, marker="READY")


def _worker_main(argv: list[str]) -> int:
    import asyncio

    parser = argparse.ArgumentParser(prog="python -m bench.procrastinate_baseline worker")
    parser.add_argument("--schema", required=True)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--name", default="worker")
    args = parser.parse_args(argv)
    app = make_app(args.schema)

    async def run() -> None:
        async with app.open_async():
            print("READY", flush=True)
            await app.run_worker_async(concurrency=args.concurrency, name=args.name, wait=True,
                                       listen_notify=True, fetch_job_polling_interval=0.5,
                                       install_signal_handlers=True)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        sys.exit("usage: python -m bench.procrastinate_baseline worker --schema S [--concurrency 4]")
    sys.exit(_worker_main(sys.argv[2:]))
