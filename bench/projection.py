"""Projection catch-up and rebuild against a raw read of the same notification log.

The log is synthetic but shaped like a real one: operations in waves of 1,000, each going
through ``Intended`` (co-committed with the item's ``Created``), ``Claimed`` + ``AttemptStarted``
(one commit, as the worker does), ``Succeeded``, and ``Settled`` (co-committed with the item's
``Settled``), each step saved for 500 operations per ``save()``. So a log of N ledger events
holds N / 5 operations and 1.4 N events in all (the host's own events are interleaved, as in a
real store, and skipped by the projection's topic filter).

Measured, each on the same log:

- ``projection.raw_read``: ``app.recorder.select_notifications(start, limit=1000,
  topics=ledger topics)`` until exhausted: the floor any follower pays;
- ``projection.raw_read_decode`` (diagnostic): the same plus ``mapper.to_domain_event``;
- ``projection.raw_rows`` (diagnostic): the projection's own reader,
  ``LogReads.records_list_after`` (``migrations.drivers``) (plain rows, no ``Notification`` objects), in the
  same batches: how much of the catch-up's lead over the library's read is the cheaper read;
- ``projection.catch_up``: ``StatusProjection.catch_up()`` from position 0 into an empty table
  (reset between repetitions), ratio against the raw read;
- ``projection.rebuild``: ``StatusProjection.rebuild()`` (into a new table, then swapped in),
  in seconds.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from uuid import uuid4

from bench.app import BenchApp, Item
from bench.harness import Options, Result, Stats, fresh_store, rate, worker_gc, writer
from ledger.config import Database
from migrations.drivers import driver_of
from projections.rows import ledger_topics
from projections.status import StatusProjection
from projections.view import MAIN_TABLE
from projections.views import open_view

WAVE = 1000
CHUNK = 500
EVENTS_PER_OPERATION = 5
READ_BATCH = 1000
TARGET_RATIO = 0.5
TARGET_REBUILD_SECONDS = 60.0


def build_log(app: BenchApp, ledger_events: int, log=print) -> float:
    """Append a synthetic log of ``ledger_events`` ledger events. Returns the seconds it took."""
    began = time.perf_counter()
    operations = ledger_events // EVENTS_PER_OPERATION
    now = datetime.now(UTC)
    done = 0
    while done < operations:
        size = min(WAVE, operations - done)
        items = [Item(n=done + i) for i in range(size)]
        ops = [app.new_operation(item, done + i, now=now) for i, item in enumerate(items)]
        _save_pairs(app, items, ops)
        epochs, attempts = [], []
        for op in ops:
            epochs.append(op.claim(now=now, worker_id="bench", lease_seconds=30))
            attempts.append(uuid4())
            op.start_attempt(epoch=epochs[-1], now=now, attempt_id=attempts[-1], request_fingerprint=op.fingerprint)
        _save_pairs(app, [], ops)
        for op, epoch, attempt in zip(ops, epochs, attempts):
            op.succeed(epoch=epoch, now=now, attempt_id=attempt, status_code=200)
        _save_pairs(app, [], ops)
        for item, op in zip(items, ops):
            item.on_result(_Outcome(op.execution.value))
            op.settle(now=now, entity_version=item.version)
        _save_pairs(app, items, ops)
        done += size
        if done % 50_000 < WAVE:
            log(f"  projection: built {done * EVENTS_PER_OPERATION:,} ledger events "
                f"({time.perf_counter() - began:.0f} s)")
    return time.perf_counter() - began


class _Outcome:
    def __init__(self, result: str) -> None:
        self.result = result


def _save_pairs(app: BenchApp, items: list, ops: list) -> None:
    for start in range(0, len(ops), CHUNK):
        app.save(*items[start:start + CHUNK], *ops[start:start + CHUNK])


def raw_read(app: BenchApp, *, decode: bool) -> tuple[int, float]:
    topics = ledger_topics()
    began = time.perf_counter()
    position, count = 0, 0
    while True:
        batch = app.recorder.select_notifications(start=position + 1, limit=READ_BATCH, topics=topics)
        if not batch:
            break
        if decode:
            for notification in batch:
                app.mapper.to_domain_event(notification)
        count += len(batch)
        position = batch[-1].id
    return count, time.perf_counter() - began


def raw_rows(app: BenchApp) -> tuple[int, float]:
    topics, ids = list(ledger_topics()), {}
    began = time.perf_counter()
    position, count = 0, 0
    while batch := driver_of(app).records_list_after(position, READ_BATCH, topics, ids):
        count += len(batch)
        position = batch[-1][0]
    return count, time.perf_counter() - began


def reset_view(database: Database) -> None:
    """Empty the status table and its tracking row, so ``catch_up`` starts from zero."""
    if database.backend == "postgres":
        import psycopg

        with psycopg.connect(database.conninfo(), options=f"-c search_path={database.schema}") as conn:
            conn.execute(f"TRUNCATE {MAIN_TABLE}")
            conn.execute("DELETE FROM opledger_tracking")
    else:
        import sqlite3

        conn = sqlite3.connect(database.path)
        with conn:
            conn.execute(f"DELETE FROM {MAIN_TABLE}")
            conn.execute("DELETE FROM opledger_tracking")
        conn.close()


def _repetition(app: BenchApp, database: Database, events: int, samples: dict[str, list[float]]) -> None:
    count, seconds = raw_read(app, decode=False)
    samples["raw"].append(rate(count, seconds))
    count, seconds = raw_read(app, decode=True)
    samples["decode"].append(rate(count, seconds))
    count, seconds = raw_rows(app)
    samples["rows"].append(rate(count, seconds))
    reset_view(database)
    view = open_view(database)
    try:
        began = time.perf_counter()
        applied = StatusProjection(app=app, view=view).catch_up()
        samples["catch_up"].append(rate(applied, time.perf_counter() - began))
        began = time.perf_counter()
        StatusProjection(app=app, view=view).rebuild()
        samples["rebuild"].append(time.perf_counter() - began)
    finally:
        view.close()
    assert applied == count == events, (applied, count, events)


def measure(backend: str, events: int, repetitions: int, options: Options, log=print) -> list[Result]:
    samples: dict[str, list[float]] = {"raw": [], "decode": [], "rows": [], "catch_up": [], "rebuild": []}
    with fresh_store(backend, options) as database, writer(database) as app:
        built = build_log(app, events, log)
        log(f"  projection {backend} {events:,}: log built in {built:.1f} s")
        raw_read(app, decode=False)  # warm the server's cache once, untimed
        # The projection runs inside worker processes, so it is measured with their collector
        # settings; the baseline reads beside it too, so the ratio compares like with like.
        with worker_gc():
            for rep in range(repetitions):
                _repetition(app, database, events, samples)
                log(f"  projection rep {rep + 1} {backend} {events:,}: raw {samples['raw'][-1]:,.0f}/s, "
                    f"decode {samples['decode'][-1]:,.0f}/s, catch-up {samples['catch_up'][-1]:,.0f}/s, "
                    f"rebuild {samples['rebuild'][-1]:.1f} s")
    raw = Stats.of(samples["raw"])
    catch_up = Stats.of(samples["catch_up"])
    size = f"{events // 1000}k" if events < 1_000_000 else f"{events // 1_000_000}M"
    note = f"log of {events:,} ledger events ({int(events * 1.4):,} in all); built in {built:.0f} s"
    ratio = catch_up.median / raw.median
    rebuild = Stats.of(samples["rebuild"])
    return [
        Result(name=f"projection.raw_read.{size}", backend=backend, workers=None, stats=raw, unit="events/s",
               n=events, note="select_notifications in batches of 1,000 (baseline)"),
        Result(name=f"projection.raw_read_decode.{size}", backend=backend, workers=None,
               stats=Stats.of(samples["decode"]), unit="events/s", n=events,
               ratio=Stats.of(samples["decode"]).median / raw.median, baseline=f"projection.raw_read.{size}",
               note="diagnostic: raw read + mapper.to_domain_event"),
        Result(name=f"projection.raw_rows.{size}", backend=backend, workers=None,
               stats=Stats.of(samples["rows"]), unit="events/s", n=events,
               ratio=Stats.of(samples["rows"]).median / raw.median, baseline=f"projection.raw_read.{size}",
               note="diagnostic: the projection's own plain-row read (records_list_after)"),
        Result(name=f"projection.catch_up.{size}", backend=backend, workers=None, stats=catch_up, unit="events/s",
               n=events, ratio=ratio, baseline=f"projection.raw_read.{size}",
               target="≥ 0.5x raw read", met=ratio >= TARGET_RATIO, note=note),
        Result(name=f"projection.rebuild.{size}", backend=backend, workers=None, stats=rebuild, unit="s",
               n=events, extra={"events_per_second": round(events / rebuild.median)},
               target="≤ 60 s" if events >= 1_000_000 else None,
               met=rebuild.median <= TARGET_REBUILD_SECONDS if events >= 1_000_000 else None),
    ]


def run(options: Options, log=print) -> list[Result]:
    results: list[Result] = []
    small = options.size(100_000, 2_000) if options.n is None else options.n
    plan = [("postgres", small, options.repetitions), ("sqlite", small, options.repetitions)]
    if options.full and not options.smoke:
        # About 10 minutes on the reference machine; SQLite's 1M is left out (extrapolate from 100k).
        plan += [("postgres", 1_000_000, 1)]
    for backend, events, repetitions in plan:
        results += measure(backend, events, repetitions, options, log)
    return results
