"""``python -m bench``: run the scenarios, print a table, write ``bench/results.json``.

    python -m bench                 # every scenario at its default size (see docs/performance.md)
    python -m bench --full          # also the 1M-event projection logs
    python -m bench --smoke         # tiny sizes, one repetition: CI's smoke run (< 1 minute)
    python -m bench --only throughput --repeat 5 --n 5000
    python -m bench --only history --n 200000   # the big store (opt-in; --n is the preload)
    python -m bench --only wire --repeat 2      # issue 30's rows: drain.wire, client.bare, beside their drains

Needs PostgreSQL (``OPLEDGER_BENCH_POSTGRES_URL``, default ``postgresql://root@127.0.0.1:5432/test``)
and the bench extra (``pip install -e '.[bench]'``). Run from the repository root.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import cocommit, history, memory, outages, projection, recovery, report, simulation, throughput
from bench.harness import BACKENDS, Options, Result, postgres_version

SCENARIOS: dict[str, Callable[..., list[Result]]] = {
    "cocommit": cocommit.run,
    "throughput": throughput.run,
    "projection": projection.run,
    "recovery": recovery.run,
    "memory": memory.run,
    "simulation": simulation.run,
    "outages": outages.run,
    "history": history.run,
    "wire": throughput.run_wire,
}
OPT_IN = {"history", "wire"}
"""Scenarios only ``--only`` runs (the big-store preload takes minutes)."""


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny N, one repetition (CI smoke run)")
    parser.add_argument("--full", action="store_true", help="also the opt-in big sizes (1M-event logs)")
    parser.add_argument("--only", action="append", choices=sorted(SCENARIOS), metavar="NAME",
                        help=f"run only this scenario (repeatable): {', '.join(SCENARIOS)}")
    parser.add_argument("--repeat", type=int, default=3, metavar="K", help="repetitions per configuration (3)")
    parser.add_argument("--n", type=int, default=None, metavar="N", help="override the scenario's size")
    parser.add_argument("--backend", action="append", choices=BACKENDS, metavar="NAME",
                        help="only this backend (repeatable; the history scenario): postgres, sqlite")
    parser.add_argument("--output", type=Path, default=report.RESULTS_PATH, help="results file (bench/results.json)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (worker logs)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    from adapters.logs import configure_logging

    configure_logging("console", level=logging.WARNING)  # in-process workers (SQLite end to end)
    options = Options(smoke=args.smoke, full=args.full, repeat=max(1, args.repeat), n=args.n,
                      backends=tuple(args.backend or BACKENDS))
    names = args.only or [name for name in SCENARIOS if name not in OPT_IN]
    results: list[Result] = []
    code = report.code_state()
    load = [round(x, 2) for x in os.getloadavg()]
    began = time.perf_counter()
    print(f"opledger bench: {', '.join(names)}{' (smoke)' if args.smoke else ''}; work dir {options.workdir}",
          flush=True)
    try:
        pg = postgres_version()
        for name in names:
            print(f"[{name}]", flush=True)
            started = time.perf_counter()
            results += SCENARIOS[name](options, log=lambda line: print(line, flush=True))
            print(f"[{name}] {time.perf_counter() - started:.1f} s", flush=True)
    finally:
        elapsed = time.perf_counter() - began
        after = report.code_state()
        code["changed_during_run"] = after["product_digest"] != code["product_digest"]
        machine = {**report.machine(locals().get("pg")), "load_average_at_start": load}
        report.write(results, path=args.output, command=report.command_line(),
                     options={"smoke": args.smoke, "full": args.full, "repeat": options.repetitions,
                              "n": args.n, "only": names},
                     machine_info=machine, seconds=elapsed, code=code)
        if not args.keep:
            shutil.rmtree(options.workdir, ignore_errors=True)
    print()
    print(report.table(results))
    print(f"\n{len(results)} results in {elapsed:.0f} s; written to {args.output}")
    if code["changed_during_run"]:
        print("warning: the product code changed during the run; the numbers mix versions", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
