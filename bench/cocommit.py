"""Co-commit overhead: an entity transition saved with its ``Intended`` vs. saved alone.

Same application, same store, same connection pool, one thread. Each repetition runs three
rounds of blocks of K saves of each variant back to back (alone, with intent, and a diagnostic
third), so drift in the machine hits all alike; median, min and max are over the blocks:

- ``alone``: ``Item(n)`` then ``save(item)`` (one event, one transaction);
- ``with intent``: ``Item(n)``, ``intend(item, ...)``, ``save(item, op)`` (the public co-commit
  API: two events, one transaction);
- ``with intent, no lookup`` (diagnostic): the ``Intended`` built with ``Operation.intend``
  directly, skipping ``LedgerApplication.intend``'s read of an existing operation.

The ratio is the co-commit rate over the alone rate; overhead = 1 / ratio - 1.
"""

from __future__ import annotations

import itertools
import time

from bench.harness import BACKENDS, Options, Result, Stats, fresh_store, rate, writer

TARGET_OVERHEAD = 0.10
BLOCKS_PER_REPETITION = 3


def run(options: Options, log=print) -> list[Result]:
    k = options.size(400, 20) if options.n is None else max(10, options.n // 5)
    # Three blocks per requested repetition: a block lasts well under a second, so one stall of
    # the disk (seen: a block of SQLite saves at a third of its usual rate) would otherwise move
    # the median of one variant only.
    reps = options.repetitions * BLOCKS_PER_REPETITION
    results: list[Result] = []
    counter = itertools.count()
    for backend in BACKENDS:
        with fresh_store(backend, options) as database, writer(database) as app:
            variants = {
                "alone": app.create_alone,
                "with_intent": app.create_with_intent,
                "with_intent_no_lookup": app.create_with_intent_unchecked,
            }
            for fn in variants.values():  # warm the pool and caches
                for _ in range(5):
                    fn(next(counter))
            samples: dict[str, list[float]] = {name: [] for name in variants}
            for rep in range(reps):
                for name, fn in variants.items():
                    began = time.perf_counter()
                    for _ in range(k):
                        fn(next(counter))
                    samples[name].append(rate(k, time.perf_counter() - began))
                log(f"  cocommit rep {rep + 1} {backend}: " +
                    ", ".join(f"{name} {values[-1]:.0f}/s" for name, values in samples.items()))
        alone = Stats.of(samples["alone"])
        results.append(Result(name="cocommit.alone", backend=backend, workers=None, stats=alone, unit="saves/s",
                              n=k, note="entity transition saved alone (baseline)"))
        for name, label in (("with_intent", "cocommit.with_intent"),
                            ("with_intent_no_lookup", "cocommit.with_intent_no_lookup")):
            stats = Stats.of(samples[name])
            ratio = stats.median / alone.median
            overhead = 1 / ratio - 1
            result = Result(name=label, backend=backend, workers=None, stats=stats, unit="saves/s", n=k,
                            ratio=ratio, baseline="cocommit.alone",
                            extra={"overhead": round(overhead, 4),
                                   "per_save_ms": round(1000 / stats.median, 3),
                                   "alone_per_save_ms": round(1000 / alone.median, 3)})
            if name == "with_intent":
                result.target = "overhead ≤ 10 %"
                result.met = overhead <= TARGET_OVERHEAD
            else:
                result.note = "diagnostic: Operation.intend without LedgerApplication.intend's lookup"
            results.append(result)
    return results
