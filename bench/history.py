"""The big-store scenario (issue 29 item 6): does the ledger stay fast with a month behind it?

In one run, per backend: ``N`` closed operations are preloaded (``bench.preload``), the store
is analyzed and checkpointed (:func:`analyze`, :func:`settle`), then

- ``history.e2e``: the end-to-end rate (``bench.throughput``'s e2e run: producers commit
  intents one transaction each while workers drain them) on the big store, as a ratio to the
  same run on an empty store, interleaved, ``--repeat`` times each; timed from ready workers on
  both backends, and the seconds until they were ready (their start checks: on SQLite
  ``PRAGMA quick_check`` and the readable-history count read the whole file) are reported beside
  it, per store, as ``extra.workers_ready_seconds``;
- ``history.read.list``, ``.attention``, ``.timeline``, ``.metrics``: p50 and p99 of the
  status view's first page, the attention queue, one operation's timeline (its events,
  decoded) and a ``/metrics`` scrape (over the HTTP app, in process) on the big store;
- ``history.size``: the store's bytes after the preload, after the e2e runs, after archiving,
  after ``VACUUM`` and, on PostgreSQL, after ``VACUUM FULL`` (plain ``VACUUM`` returns no space
  to the file system there), beside a fresh store's; its ratio is the reclaimed store over a
  fresh store plus the archive index (the ``opledger_archive*`` tables, ``table_bytes``), counting
  opledger's own tables only: the host application's records (its entities' events, in the
  library's events table) are not operations and stay, shown apart; ``extra.tables_after_reclaim``
  says what is left, table by table;
- ``history.archive``: ``opledger archive`` of every preloaded operation (a subprocess, as an
  operator's timer runs it, with its default pacing: ``--nice``), in operations per second, and
  on PostgreSQL the e2e rate while it runs as a ratio to the big store's rate without it (on
  SQLite one process owns the store, so a worker and an archive run take turns: not measured);

Targets (issue 29): e2e at least 0.9x; list, attention and timeline p99 under 50 ms;
``/metrics`` under 200 ms (at p99 here); e2e while archiving at least 0.8x; after archiving and
reclaiming, within 20 % of a fresh store plus the archive index. Not in the default set: the
preload takes minutes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.app import APP_TOPIC
from bench.harness import Options, Result, Stats, fresh_store, rate, url_of, worker_env
from bench.preload import EPOCH, preload
from bench.throughput import Config, e2e, e2e_postgres_on, e2e_sqlite_on
from ledger.config import Database, Settings

DEFAULT_N = {"postgres": 1_000_000, "sqlite": 200_000}
SMOKE_N = 300
E2E_N = (2000, 40)
"""Operations per end-to-end run (default, smoke)."""
READS = (200, 10)
"""Samples per read (default, smoke)."""
READ_TARGET_MS = 50.0
METRICS_TARGET_MS = 200.0
E2E_TARGET = 0.9
POLL = 0.25
"""Seconds between the e2e runs' completion polls, empty and big alike. Before the status
counters (ADR 0011) each poll was a ``GROUP BY status`` over every row (30 ms on 200,000 rows
on PostgreSQL); kept, so runs compare with the figures before them."""
ARCHIVE_TARGET = 0.8
ALONGSIDE_RUNS = 3
"""e2e runs beside the archive run (one after another, from its first recorded segment on); the
row's ratio is their median over the big store's."""
SIZE_TARGET = 1.2


def percentile(samples: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``samples`` by nearest rank (no interpolation).

    Raises:
        ValueError: no samples.
    """
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def store_bytes(database: Database) -> int:
    """The store's size on disk: the schema's relations with their indexes and TOAST on
    PostgreSQL, the database file with its WAL on SQLite."""
    if database.backend == "sqlite":
        path = str(database.path)
        return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    return sum(table_bytes(database).values())


def table_bytes(database: Database) -> dict[str, int]:
    """Bytes per table with its indexes (and TOAST on PostgreSQL), largest first: what is left
    in a store, and how big the archive index is (the ``opledger_archive*`` tables). SQLite
    counts pages through its ``dbstat`` table; a build without it gives ``{}``."""
    if database.backend == "sqlite":
        import sqlite3

        with closing(sqlite3.connect(str(database.path))) as lite:
            try:
                rows = lite.execute("SELECT m.tbl_name, sum(d.pgsize) FROM dbstat d JOIN sqlite_master m "
                                    "ON m.name = d.name GROUP BY m.tbl_name").fetchall()
            except sqlite3.OperationalError:
                return {}
    else:
        import psycopg

        with psycopg.connect(database.conninfo()) as conn:
            rows = conn.execute("SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                                "WHERE n.nspname = %s AND c.relkind = 'r'", (database.schema,)).fetchall()
    return dict(sorted(((str(name), int(size)) for name, size in rows), key=lambda item: -item[1]))


def wal_counters(database: Database) -> dict[str, float]:
    """PostgreSQL's cumulative WAL counters (``pg_stat_wal``: records, full-page images, bytes)
    and checkpoints started (``pg_stat_bgwriter``), server-wide: the runner is alone on the
    server while it measures (the empty store's runs include creating and dropping it). ``{}`` on
    SQLite. Subtracted around each e2e run, they say what a big store's random B-tree pages cost
    in WAL (a page first changed after a checkpoint is logged whole)."""
    if database.backend == "sqlite":
        return {}
    import psycopg

    with psycopg.connect(database.conninfo(), autocommit=True) as conn:
        records, fpi, size = conn.execute("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal").fetchone()
        checkpoints = conn.execute("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter").fetchone()[0]
    return {"records": records, "fpi": fpi, "bytes": float(size), "checkpoints": checkpoints}


def per_op(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    """``after - before`` per operation (checkpoints as a count), rounded."""
    return {key: (after[key] - before[key]) if key == "checkpoints" else round((after[key] - before[key]) / n, 2)
            for key in before}


def archive_index_bytes(tables: dict[str, int]) -> int:
    """The archive index's share of ``tables`` (:func:`table_bytes`): the ``opledger_archive*``
    tables (archived operations and receipts, segments, carried-forward totals)."""
    return sum(size for name, size in tables.items() if name.startswith("opledger_archive"))


def analyze(database: Database) -> None:
    """Gather the planner's statistics of the store, as autovacuum would have over the month the
    preload stands for (``VACUUM (ANALYZE)`` of every table of its schema on PostgreSQL,
    ``ANALYZE`` on SQLite). Without them PostgreSQL plans for tables it believes empty: the
    reference machine's server runs with ``autovacuum = off``, and a bulk load ends with no
    statistics at all (e2e on 1,000,000 operations: 0.30x the empty store's)."""
    _vacuum(database, sqlite=["ANALYZE"], postgres="VACUUM (ANALYZE)")


def settle(database: Database) -> None:
    """Write out what the preload left in memory and in the WAL (``CHECKPOINT`` on PostgreSQL;
    ``PRAGMA wal_checkpoint(TRUNCATE)`` on SQLite), then every dirty page the kernel holds
    (``os.sync``), so the measurements start on a store at rest, as a month-old one is. Without
    it the first e2e runs shared the disk with writing out the preload: on PostgreSQL at
    1,000,000 operations 0.27x the empty store's, against 0.85x on the same store later; on
    SQLite at 200,000 the first two pairs ran at half the rate of the later ones, the empty
    store's included."""
    if database.backend == "sqlite":
        import sqlite3

        with closing(sqlite3.connect(str(database.path))) as lite:
            lite.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    else:
        import psycopg

        with psycopg.connect(database.conninfo(), autocommit=True) as conn:
            conn.execute("CHECKPOINT")
    os.sync()


def reclaim(database: Database, *, full: bool = False) -> None:
    """``VACUUM`` the store (every table of its schema on PostgreSQL; the file on SQLite).

    Args:
        full: ``VACUUM FULL`` on PostgreSQL, which rewrites each table and returns the space
            to the file system (plain ``VACUUM`` only makes it reusable); SQLite's ``VACUUM``
            always rewrites the file.
    """
    _vacuum(database, sqlite=["PRAGMA wal_checkpoint(TRUNCATE)", "VACUUM"],
            postgres="VACUUM FULL" if full else "VACUUM")


def _vacuum(database: Database, *, sqlite: list[str], postgres: str) -> None:
    """Run the ``sqlite`` statements on an SQLite store's file, or ``postgres`` (a ``VACUUM``
    form) on every table of a PostgreSQL store's schema, each outside a transaction."""
    if database.backend == "sqlite":
        import sqlite3

        with closing(sqlite3.connect(str(database.path))) as lite:
            for statement in sqlite:
                lite.execute(statement)
        return
    import psycopg

    with psycopg.connect(database.conninfo(), autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s",
                                             (database.schema,))]
        for table in tables:
            conn.execute(f'{postgres} "{database.schema}"."{table}"')


def read_latencies(database: Database, samples: int) -> dict[str, list[float]]:
    """Milliseconds of each operator read, ``samples`` times each, on an open read-only store."""
    from fastapi.testclient import TestClient

    from adapters.http.app import create_app
    from adapters.operator import timeline_entries
    from adapters.runtime import open_store

    with open_store(Settings(database_url=url_of(database), app=APP_TOPIC), write=False) as store, \
            TestClient(create_app(store=store)) as client:
        first = store.queries.list(limit=1)
        if not first:
            raise RuntimeError("the preloaded store shows no operation")
        op_id = first[0].operation_id

        def scrape() -> None:
            response = client.get("/metrics")
            if response.status_code != 200:
                raise RuntimeError(f"/metrics answered {response.status_code}: {response.text[:200]}")

        reads: dict[str, Callable[[], Any]] = {
            "list": lambda: store.queries.list(limit=100),
            "attention": lambda: store.queries.attention(limit=100),
            "timeline": lambda: timeline_entries(store.app, op_id),
            "metrics": scrape,
        }
        found: dict[str, list[float]] = {name: [] for name in reads}
        for _ in range(samples):
            for name, read in reads.items():
                began = time.perf_counter()
                read()
                found[name].append((time.perf_counter() - began) * 1000)
    return found


def run(options: Options, log: Callable[[str], Any] = print) -> list[Result]:
    """The history scenario on both backends; see the module docstring."""
    e2e_n = E2E_N[1] if options.smoke else E2E_N[0]  # --n sizes the preload, not these runs
    samples = READS[1] if options.smoke else READS[0]
    results: list[Result] = []
    for backend in options.backends:
        n = options.size(DEFAULT_N[backend], SMOKE_N)
        cfg = Config("e2e", backend, 2)
        big_run = e2e_postgres_on if backend == "postgres" else e2e_sqlite_on
        with fresh_store(backend, options) as database:
            loaded = preload(database, n, log=log)
            log(f"  {backend}: {n} closed operations preloaded: {loaded}")
            began = time.perf_counter()
            analyze(database)
            loaded["analyze_seconds"] = round(time.perf_counter() - began, 1)
            began = time.perf_counter()
            settle(database)
            loaded["settle_seconds"] = round(time.perf_counter() - began, 1)
            sizes = {"after_preload": store_bytes(database)}
            latencies = read_latencies(database, samples)
            empty: list[float] = []
            big: list[float] = []
            starts: dict[str, list[float]] = {"empty": [], "big": []}
            wal: dict[str, list[dict[str, float]]] = {"empty": [], "big": []}
            for _ in range(options.repetitions):
                before = wal_counters(database)
                seconds, extra = e2e(cfg, e2e_n, options, {}, poll=POLL)
                between = wal_counters(database)
                wal["empty"].append(per_op(before, between, e2e_n))
                empty.append(rate(e2e_n, seconds))
                starts["empty"].append(extra["start_seconds"])
                seconds, extra = big_run(database, cfg, e2e_n, options, {}, poll=POLL)
                wal["big"].append(per_op(between, wal_counters(database), e2e_n))
                big.append(rate(e2e_n, seconds))
                starts["big"].append(extra["start_seconds"])
                log(f"  {backend}: e2e empty {empty[-1]:.0f}/s, big {big[-1]:.0f}/s; workers ready in "
                    f"{starts['empty'][-1]:.2f} / {starts['big'][-1]:.2f} s")
            sizes["after_e2e"] = store_bytes(database)
            during: list[float] = []

            def alongside() -> None:
                if backend == "postgres":  # one process owns an SQLite store: nothing runs beside
                    for _ in range(1 if options.smoke else ALONGSIDE_RUNS):
                        seconds, _extra = big_run(database, cfg, e2e_n, options, {}, poll=POLL)
                        during.append(rate(e2e_n, seconds))
                        log(f"  {backend}: e2e while archiving {during[-1]:.0f}/s")

            archived = archive_all(database, options.workdir / f"archive-{backend}", n, alongside)
            log(f"  {backend}: archived {archived['operations']} in {archived['seconds']:.1f} s")
            sizes["after_archive"] = store_bytes(database)
            reclaim(database)
            sizes["after_vacuum"] = store_bytes(database)
            if backend == "postgres":
                reclaim(database, full=True)
                sizes["after_vacuum_full"] = store_bytes(database)
            left = table_bytes(database)
        with fresh_store(backend, options) as fresh:
            sizes["fresh"] = store_bytes(fresh)
        results += _rows(backend, n, e2e_n, loaded, empty, big, starts, wal, latencies, sizes, left)
        results.append(_archive_row(backend, n, archived, big, during))
    return results


def archive_all(database: Database, out: Path, n: int, alongside: Callable[[], None]) -> dict[str, Any]:
    """Run ``opledger archive`` on the preloaded operations (those closed before the preload's
    clock ran out) in a subprocess, calling ``alongside()`` while it runs; then archive the rest
    (the e2e runs' operations, with ``--before 1s``), so the store keeps only the index.

    Returns:
        The first run's JSON report, with ``seconds`` (its wall time), ``overlapped`` (whether
        it was still running when ``alongside`` returned) and ``rest`` (the second run's count).

    Raises:
        RuntimeError: a run failed.
    """
    before = (EPOCH + timedelta(seconds=n + 1)).isoformat().replace("+00:00", "Z")
    began = time.perf_counter()
    run = _archive(database, out, before)
    try:
        # In its steady state: a run's first seconds are its start (imports, recovery, the first
        # selection), and a few-second e2e run measured there says little about the rest.
        started = time.perf_counter()  # bounded: its output is read only when it ends
        while run.poll() is None and not (out / "seg-000001").is_dir() and time.perf_counter() - started < 120:
            time.sleep(0.05)
        alongside()
        overlapped = run.poll() is None
        stdout, stderr = run.communicate(timeout=3600)
    finally:
        if run.poll() is None:
            run.kill()
    report = _report(run, stdout, stderr)
    report["seconds"] = time.perf_counter() - began
    report["overlapped"] = overlapped
    time.sleep(1.5)  # the last e2e operations settle more than --before ago
    rest = _archive(database, out, "1s", "--nice", "0")  # nothing runs beside it: flat out
    report["rest"] = _report(rest, *rest.communicate(timeout=3600))["operations"]
    return report


def _archive(database: Database, out: Path, before: str, *flags: str) -> subprocess.Popen[str]:
    """``opledger archive --out out --before before --json [flags]`` on ``database``, started."""
    return subprocess.Popen([sys.executable, "-m", "adapters.cli", "archive", "--out", str(out), "--before", before,
                             "--json", *flags], env={**os.environ, **worker_env(database)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _report(run: subprocess.Popen[str], stdout: str, stderr: str) -> dict[str, Any]:
    """An archive run's JSON report.

    Raises:
        RuntimeError: it exited non-zero.
    """
    if run.returncode != 0:
        raise RuntimeError(f"opledger archive exited {run.returncode}: {stderr[-2000:]}")
    found: dict[str, Any] = json.loads(stdout)
    return found


def _archive_row(backend: str, n: int, archived: dict[str, Any], big: list[float], during: list[float]) -> Result:
    """The archive row: operations per second, and the e2e rate beside it."""
    per_s = archived["operations"] / archived["seconds"]
    beside = bool(during) and archived["overlapped"]
    ratio = statistics.median(during) / statistics.median(big) if beside else None
    note = ("" if beside else "e2e beside it not measured: one process owns an SQLite store" if not during
            else "e2e beside it not counted: the archive run ended first (preload more)")
    return Result("history.archive", backend, None, Stats(median=per_s, min=per_s, max=per_s, samples=()), "ops/s",
                  ratio=ratio, baseline="e2e on the big store, no archive run" if beside else None, n=n,
                  target=f"e2e beside it >= {ARCHIVE_TARGET}x", met=None if ratio is None else ratio >= ARCHIVE_TARGET,
                  note=note,
                  extra={"preloaded": n, "report": archived, "e2e_while_archiving_ops_per_s": during})


def _rows(backend: str, n: int, e2e_n: int, loaded: dict[str, float], empty: list[float], big: list[float],
          starts: dict[str, list[float]], wal: dict[str, list[dict[str, float]]],
          latencies: dict[str, list[float]], sizes: dict[str, int], left: dict[str, int]) -> list[Result]:
    """The scenario's result rows for one backend (``starts``: the seconds until the workers
    were ready, per run, on the empty and the big store: the e2e rates are timed from there;
    ``wal``: each run's :func:`per_op` WAL counters, empty on SQLite)."""
    ratio = statistics.median(big) / statistics.median(empty)
    rows = [Result("history.e2e", backend, 2, Stats.of(big), "ops/s", ratio=ratio, baseline="e2e on an empty store",
                   n=e2e_n, target=f">= {E2E_TARGET}x empty", met=ratio >= E2E_TARGET,
                   extra={"preloaded": n, "poll_seconds": POLL, "empty_ops_per_s": Stats.of(empty).__dict__, "preload": loaded,
                          "workers_ready_seconds": {store: Stats.of(runs).__dict__ for store, runs in starts.items()},
                          **({"wal_per_op": wal} if any(wal["big"]) else {})})]
    for name, samples in latencies.items():
        bound = METRICS_TARGET_MS if name == "metrics" else READ_TARGET_MS
        p99 = percentile(samples, 0.99)
        stats = Stats(median=statistics.median(samples), min=min(samples), max=max(samples), samples=())
        rows.append(Result(f"history.read.{name}", backend, None, stats, "ms", n=len(samples),
                           target=f"p99 < {bound:.0f} ms", met=p99 < bound,
                           extra={"preloaded": n, "p50_ms": round(percentile(samples, 0.5), 3),
                                  "p99_ms": round(p99, 3)}))
    mib = [value / 2**20 for value in sizes.values()]
    # The size target: the store, once archived and reclaimed, against a fresh store plus the
    # archive index it must keep. Measurable only where the tables' sizes are (not SQLite
    # without dbstat), and on PostgreSQL only after VACUUM FULL (plain VACUUM returns nothing).
    # The host application's own records (its entities' events, in the library's events table)
    # are not operations: archiving never moves them, so they are set apart, and shown.
    index = archive_index_bytes(left)
    owned = sum(size for name, size in left.items() if name.startswith(("opledger_", "_yoyo", "yoyo")))
    final = sizes.get("after_vacuum_full", sizes["after_vacuum"])
    size_ratio = owned / (sizes["fresh"] + index) if left else None
    rows.append(Result("history.size", backend, None, Stats(median=mib[0], min=min(mib), max=max(mib), samples=()),
                       "MiB", n=n, note="median = after preload", ratio=size_ratio,
                       baseline="a fresh store plus the archive index" if left else None,
                       target=f"reclaimed (the host's records aside) <= {SIZE_TARGET}x a fresh store plus the "
                       "archive index", met=None if size_ratio is None else size_ratio <= SIZE_TARGET,
                       extra={"bytes": sizes, "preloaded": n, "archive_index_bytes": index,
                              "opledger_bytes_after_reclaim": owned, "host_bytes_after_reclaim": final - owned,
                              "tables_after_reclaim": left}))
    return rows
