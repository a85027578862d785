"""``python -m bench.pairs``: the runner's rows for this checkout against an older commit, in
interleaved pairs, as the median of the per-pair ratios.

    python -m bench.pairs --base b483924                       # throughput and outages, 4 pairs
    python -m bench.pairs --base b483924 --pairs 6 --only throughput

The base commit and this checkout's HEAD (committed code only) are checked out into temporary
git worktrees and run with this checkout's interpreter (its dependencies are the ones installed
here). Each pair runs the base and this
checkout once each (``python -m bench --only ... --repeat 1``), alternating which goes first so
that a machine getting slower or faster through the run weighs on both sides alike. For every row
(name, backend, workers) the pair's ratio is this checkout's median over the base's; the verdict
is the median of those ratios, against the 5 % bound of issues 28 and 33 ("no benchmark row
regresses by more than 5 %, median of at least 4 interleaved pairs"). Rows measured in ``ms`` are
better when lower, so their ratio is inverted before the bound is applied. Procrastinate's rows run
the same third-party code on both sides: their spread is the run's noise floor, printed apart.

Writes ``bench/pairs-<base>-<head>.json`` (every run's results file and the ratios) and prints
one line per row. Needs what ``python -m bench`` needs (PostgreSQL, nginx for the wire rows).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BOUND = 0.95
"""A row regresses when its median ratio (better-is-higher) falls below this: the 5 % bound."""
CONTROL_PREFIX = "procrastinate."
Row = tuple[str, str, int]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.pairs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the commit to compare against (any git revision)")
    parser.add_argument("--pairs", type=int, default=4, help="interleaved pairs (4)")
    parser.add_argument("--only", action="append", default=None, metavar="NAME",
                        help="bench scenario (repeatable; default: throughput and outages)")
    parser.add_argument("--output", type=Path, default=None, help="results (bench/pairs-<base>-<head>.json)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the pairs and print the comparison; returns 1 when a row regresses past the bound,
    2 when the base cannot be checked out, else 0."""
    args = parse(argv)
    scenarios = args.only or ["throughput", "outages"]
    base = _git("rev-parse", "--short", args.base)
    head = _git("rev-parse", "--short", "HEAD")
    if base is None or head is None:
        print(f"bench.pairs: {args.base!r} is not a commit of this repository", file=sys.stderr)
        return 2
    output = args.output or REPO / "bench" / f"pairs-{base}-{head}.json"
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="opledger-pairs-") as tmp:
        # Both sides run from committed snapshots, so editing this checkout meanwhile changes neither.
        trees = {side: Path(tmp) / side for side in ("base", "head")}
        for side, rev in (("base", base), ("head", head)):
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(trees[side]), rev],
                           check=True)
        try:
            for index in range(max(1, args.pairs)):
                order = ["base", "head"] if index % 2 == 0 else ["head", "base"]
                for side in order:
                    print(f"pair {index + 1}/{args.pairs}: {side}", flush=True)
                    runs.append({"pair": index, "side": side,
                                 "results": _run(trees[side], scenarios, Path(tmp) / f"{side}-{index}.json")})
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    rows = compare(runs)
    output.write_text(json.dumps({"base": base, "head": head, "scenarios": scenarios, "pairs": args.pairs,
                                  "command": " ".join(["python -m bench.pairs", *sys.argv[1:]]),
                                  "rows": rows, "runs": runs}, indent=1) + "\n")
    regressed = _print(rows, base, head)
    print(f"written {output.relative_to(REPO) if output.is_relative_to(REPO) else output}")
    return 1 if regressed else 0


def _git(*args: str) -> str | None:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def _run(root: Path, scenarios: list[str], output: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "bench", "--repeat", "1", "--output", str(output)]
    for name in scenarios:
        command += ["--only", name]
    subprocess.run(command, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    results: list[dict[str, Any]] = json.loads(output.read_text())["results"]
    return results


def compare(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row, the per-pair ratios (head over base, inverted for ``ms`` rows so higher is always
    better) and their median. ``runs`` are ``{"pair", "side", "results"}`` with the runner's
    result rows; a row missing on either side of a pair is left out of that pair."""
    by_pair: dict[int, dict[str, dict[Row, dict[str, Any]]]] = {}
    for run in runs:
        rows = {(r["name"], r["backend"], int(r["workers"])): r for r in run["results"]}
        by_pair.setdefault(run["pair"], {})[run["side"]] = rows
    ratios: dict[Row, list[float]] = {}
    units: dict[Row, str] = {}
    for sides in by_pair.values():
        for key, head in sides.get("head", {}).items():
            base = sides.get("base", {}).get(key)
            if base is None or not base["median"] or not head["median"]:
                continue
            ratio = head["median"] / base["median"]
            ratios.setdefault(key, []).append(1 / ratio if head["unit"] == "ms" else ratio)
            units[key] = head["unit"]
    return [{"name": name, "backend": backend, "workers": workers, "unit": units[(name, backend, workers)],
             "ratios": [round(r, 4) for r in found], "median": round(statistics.median(found), 4),
             "control": name.startswith(CONTROL_PREFIX)}
            for (name, backend, workers), found in sorted(ratios.items())]


def _print(rows: list[dict[str, Any]], base: str, head: str) -> bool:
    print(f"{head} against {base}: median of per-pair ratios, higher is better (bound {BOUND})")
    regressed = False
    for row in rows:
        verdict = "control" if row["control"] else ("REGRESSED" if row["median"] < BOUND else "ok")
        regressed |= verdict == "REGRESSED"
        spread = f"{min(row['ratios']):.3f}-{max(row['ratios']):.3f}"
        print(f"  {row['name']:<34} {row['backend']:<8} w{row['workers']}  {row['median']:.3f}  "
              f"({spread}, {len(row['ratios'])} pairs)  {verdict}")
    return regressed


if __name__ == "__main__":
    raise SystemExit(main())
