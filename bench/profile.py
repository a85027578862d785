"""Profile a worker's drain with pyinstrument: where the time of claim, attempt, ``Succeeded``
and ``Settled`` goes.

    python -m bench.profile --backend postgres --n 3000
    python -m bench.profile --backend sqlite --n 3000 --threads 8
    python -m bench.profile --what catch-up --backend postgres --n 100000
    python -m bench.profile --what cocommit --backend sqlite --n 2000
    python -m bench.profile --what catch-up-stages --backend sqlite --n 100000
    python -m bench.profile --what cocommit-parts --backend postgres --n 2000

N items with intents are committed and projected; then one ``executors.runtime.Worker`` (the
fake adapter, the benchmark's settings) cycles *in this process* until the status view shows
all N settled. The status projection runs inside the worker's cycle on both backends (as the
SQLite runtime does; on PostgreSQL the runtime runs it on a thread, which a statistical
profiler of the main thread would not see), so the whole drain is one thread's profile.

``--what catch-up`` instead builds the projection scenario's synthetic log of N ledger events
(``bench.projection.build_log``) and profiles ``StatusProjection.catch_up()`` from zero;
``--what catch-up-stages`` times the stages of that catch-up one by one, without a profiler;
``--what cocommit-parts`` times, the same way, what an intent adds to each part of a save.

Writes ``bench/profiles/<what>-<backend>.txt``: the call tree (inclusive seconds), a flat list by
self time, and the product functions (``ledger``, ``executors``, ``projections``, ``adapters``,
``migrations``) by inclusive share of the drain.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

from adapters.fake import FakeAdapter
from bench.app import BenchApp
from bench.harness import Options, fresh_store, seed_pending, settled_count
from executors.runtime import Worker, WorkerConfig
from ledger.clock import SystemClock
from ledger.config import DEFAULT_WORKER_THREADS
from ledger.persistence import StoreLock
from projections.status import StatusProjection
from projections.views import open_view

PROFILES = Path(__file__).with_name("profiles")
PRODUCT = ("ledger/", "executors/", "projections/", "adapters/", "migrations/")
REPO = Path(__file__).resolve().parents[1]


def product_functions(session, limit: int = 25) -> list[tuple[str, float, float]]:
    """Product functions by inclusive time (outermost occurrence only, so recursion and nested
    calls of the same function are not double counted). Returns (name, seconds, share)."""
    root = session.root_frame()
    total = root.time
    inclusive: dict[str, float] = defaultdict(float)

    def walk(frame, active: frozenset[str]) -> None:
        key = None
        path = frame.file_path or ""
        if path.startswith(str(REPO)):
            relative = path[len(str(REPO)) + 1:]
            if relative.startswith(PRODUCT):
                key = f"{relative}:{frame.line_no} {frame.function}"
        if key is not None and key not in active:
            inclusive[key] += frame.time
            active = active | {key}
        for child in frame.children:
            walk(child, active)

    walk(root, frozenset())
    ranked = sorted(inclusive.items(), key=lambda kv: kv[1], reverse=True)[:limit]
    return [(name, seconds, seconds / total) for name, seconds in ranked]


def _write(session_profiler, what: str, backend: str, title: str) -> Path:
    session = session_profiler.last_session
    PROFILES.mkdir(exist_ok=True)
    out = PROFILES / f"{what}-{backend}.txt"
    lines = [f"# {title}", "", "## product functions by inclusive share", ""]
    lines += [f"{share:6.1%} {secs:8.2f} s  {name}" for name, secs, share in product_functions(session)]
    lines += ["", "## call tree", "", session_profiler.output_text(unicode=False, color=False),
              "", "## flat, by self time", "",
              session_profiler.output_text(unicode=False, color=False, flat=True, flat_time="self")]
    out.write_text("\n".join(lines))
    print(f"{title}; profile in {out}")
    return out


def profile_catch_up(backend: str, n: int) -> Path:
    from pyinstrument import Profiler

    from bench.harness import worker_gc, writer
    from bench.projection import build_log, reset_view

    with fresh_store(backend, Options()) as database, writer(database) as app, worker_gc():
        build_log(app, n, log=lambda line: None)
        reset_view(database)
        view = open_view(database)
        profiler = Profiler(interval=0.0005)
        try:
            began = time.perf_counter()
            profiler.start()
            applied = StatusProjection(app=app, view=view).catch_up()
            profiler.stop()
            seconds = time.perf_counter() - began
        finally:
            view.close()
    return _write(profiler, "catch-up", backend, f"catch-up of {applied} ledger events on {backend}: "
                  f"{seconds:.2f} s, {applied / seconds:.0f} events/s")


def catch_up_stages(backend: str, n: int) -> Path:
    """Time each stage of a catch-up separately, without a profiler: what one ledger event costs
    to read (``LogReads.records_list_after``, in the projection's chunks), decode, fold into its
    operation, derive rows (one per operation per batch) and write them with the position. The
    same calls ``StatusProjection`` makes, in batches of its default size, one after the other (the
    projection's catch-up overlaps reading and writing with folding); writes go to an emptied
    table; the collector is set as in a worker. Writes ``bench/profiles/catch-up-stages-<backend>.txt``."""
    from bench.harness import worker_gc, writer
    from bench.projection import build_log, reset_view
    from ledger.operation import Operation
    from projections.rows import row_from_operation
    from projections.status import DEFAULT_BATCH_SIZE

    spent: dict[str, float] = dict.fromkeys(("read", "decode", "fold", "rows", "write"), 0.0)
    with fresh_store(backend, Options()) as database, writer(database) as app, worker_gc():
        build_log(app, n, log=lambda line: None)
        reset_view(database)
        view = open_view(database)
        reader, cache, position, events_seen = StatusProjection(app=app, view=view), {}, 0, 0
        try:
            while True:
                began = time.perf_counter()
                records = reader._read(position, DEFAULT_BATCH_SIZE)  # the projection's own read
                spent["read"] += time.perf_counter() - began
                if not records:
                    break
                position, events_seen = records[-1][0], events_seen + len(records)
                began = time.perf_counter()
                events = [app.mapper.decode_record(*record[1:]) for record in records]
                spent["decode"] += time.perf_counter() - began
                began = time.perf_counter()
                touched = {}
                for event in events:
                    op_id = event.originator_id
                    if isinstance(event, Operation.Intended):
                        touched[op_id] = event.mutate(None)
                    else:
                        touched[op_id] = event.mutate(touched.get(op_id) or cache[op_id])
                cache.update(touched)
                spent["fold"] += time.perf_counter() - began
                began = time.perf_counter()
                rows = [row_from_operation(op) for op in touched.values()]
                spent["rows"] += time.perf_counter() - began
                began = time.perf_counter()
                view.write(rows, projection="stages", upstream=app.name, position=position)
                spent["write"] += time.perf_counter() - began
        finally:
            view.close()
    total = sum(spent.values())
    lines = [f"# catch-up stages on {backend}: {events_seen} ledger events, batches of {DEFAULT_BATCH_SIZE}", ""]
    lines += [f"{name:7} {seconds * 1e6 / events_seen:6.2f} us/event  {seconds / total:5.1%}"
              for name, seconds in spent.items()]
    lines += [f"{'total':7} {total * 1e6 / events_seen:6.2f} us/event  "
              f"({events_seen / total:,.0f} events/s; read alone {events_seen / spent['read']:,.0f} events/s)"]
    return _write_lines(lines, f"catch-up-stages-{backend}.txt")


def profile_cocommit(backend: str, n: int) -> Path:
    from pyinstrument import Profiler

    from bench.harness import writer

    with fresh_store(backend, Options()) as database, writer(database) as app:
        for i in range(20):  # warm up
            app.create_with_intent(10_000_000 + i)
        profiler = Profiler(interval=0.0002)
        began = time.perf_counter()
        profiler.start()
        for i in range(n):
            app.create_with_intent(i)
        profiler.stop()
        seconds = time.perf_counter() - began
    return _write(profiler, "cocommit", backend, f"{n} co-commits (item + intent, one save each) on {backend}: "
                  f"{seconds:.2f} s, {n / seconds:.0f} saves/s")


def cocommit_parts(backend: str, n: int) -> Path:
    """Time what an intent adds to a save, part by part, without a profiler: building the item
    (and its intent, ``LedgerApplication.intend``), encoding the pending events
    (``mapper.to_stored_event``), inserting them (``recorder.insert_events``, one transaction),
    and the whole ``save``. Each part runs on blocks of N / 5 saves, alone and with an intent
    interleaved, five times; the medians are µs per save. Writes
    ``bench/profiles/cocommit-parts-<backend>.txt``."""
    import itertools
    import statistics

    from bench.app import NOOP, Item
    from bench.harness import writer

    parts = ("build", "encode", "insert", "save")
    spent: dict[str, dict[bool, list[float]]] = {part: {False: [], True: []} for part in parts}
    counter = itertools.count(20_000_000)
    block = max(20, n // 5)

    def build(with_intent: bool) -> list[tuple]:
        built = []
        for _ in range(block):
            item = Item(n=next(counter))
            built.append((item, app.intend(item, NOOP, payload={"n": 0})) if with_intent else (item,))
        return built

    def per_save(began: float) -> float:
        return (time.perf_counter() - began) * 1e6 / block

    with fresh_store(backend, Options()) as database, writer(database) as app:
        for _ in range(20):  # warm up
            app.create_with_intent(next(counter))
        for _ in range(5):
            for with_intent in (False, True):
                began = time.perf_counter()
                built = build(with_intent)
                spent["build"][with_intent].append(per_save(began))
                began = time.perf_counter()
                stored = [[app.mapper.to_stored_event(event) for aggregate in objs for event in aggregate.pending_events]
                          for objs in built]
                spent["encode"][with_intent].append(per_save(began))
                began = time.perf_counter()
                for records in stored:
                    app.recorder.insert_events(records)
                spent["insert"][with_intent].append(per_save(began))
                built = build(with_intent)  # fresh aggregates: the ones above are recorded
                began = time.perf_counter()
                for objs in built:
                    app.save(*objs)
                spent["save"][with_intent].append(per_save(began))
    median = {part: {w: statistics.median(v) for w, v in by.items()} for part, by in spent.items()}
    lines = [f"# co-commit parts on {backend}: µs per save, medians of 5 interleaved blocks of {block}", "",
             f"{'part':28} {'alone':>8} {'with intent':>12} {'added':>8}"]
    labels = {"build": "build (Item, intend)", "encode": "encode (to_stored_event)",
              "insert": "insert (recorder, 1 txn)", "save": "save (whole app.save)"}
    for part in parts:
        alone, with_intent = median[part][False], median[part][True]
        lines.append(f"{labels[part]:28} {alone:8.1f} {with_intent:12.1f} {with_intent - alone:8.1f}")
    alone = median["build"][False] + median["save"][False]
    with_intent = median["build"][True] + median["save"][True]
    lines += ["", f"build + save: {alone:.1f} alone, {with_intent:.1f} with intent: ratio {alone / with_intent:.2f} "
              f"(the target, 0.9, allows {alone / 0.9 - alone:.1f} µs for the intent)"]
    return _write_lines(lines, f"cocommit-parts-{backend}.txt")


def _write_lines(lines: list[str], name: str) -> Path:
    """Print ``lines`` and write them to ``bench/profiles/<name>``; returns the path."""
    PROFILES.mkdir(exist_ok=True)
    out = PROFILES / name
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return out


def profile(backend: str, n: int, threads: int, batch_size: int) -> Path:
    from pyinstrument import Profiler

    options = Options()
    with fresh_store(backend, options) as database:
        seed_pending(database, n)
        lock = StoreLock(database.path).acquire() if backend == "sqlite" else None
        app = BenchApp(env=database.library_env(create_table=False))
        view = open_view(database)
        projection = StatusProjection(app=app, view=view)
        worker = Worker(app=app, view=view, adapters={"fake": FakeAdapter()}, clock=SystemClock(),
                        config=WorkerConfig(worker_id="profile", egress_slots=threads, batch_size=batch_size),
                        projection=projection, on_committed=projection.offer)
        profiler = Profiler(interval=0.0005)
        try:
            began = time.perf_counter()
            profiler.start()
            while settled_count(view) < n:
                worker.run_once()
            profiler.stop()
            seconds = time.perf_counter() - began
        finally:
            worker.close()
            view.close()
            app.close()
            if lock is not None:
                lock.release()
    return _write(profiler, "drain", backend, f"drain of {n} operations on {backend}, in-process worker "
                  f"(egress threads {threads}, batch {batch_size}): {seconds:.2f} s, {n / seconds:.0f} ops/s")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--what", choices=("drain", "catch-up", "catch-up-stages", "cocommit", "cocommit-parts"),
                        default="drain")
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=DEFAULT_WORKER_THREADS, help="egress slots (claim capacity)")
    parser.add_argument("--batch-size", type=int, default=200)
    args = parser.parse_args()
    if args.what == "cocommit":
        profile_cocommit(args.backend, args.n)
    elif args.what == "cocommit-parts":
        cocommit_parts(args.backend, args.n)
    elif args.what == "catch-up":
        profile_catch_up(args.backend, args.n)
    elif args.what == "catch-up-stages":
        catch_up_stages(args.backend, args.n)
    else:
        profile(args.backend, args.n, args.threads, args.batch_size)


if __name__ == "__main__":
    main()
