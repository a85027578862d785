"""The results: a table on stdout and ``bench/results.json``."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import Result

RESULTS_PATH = Path(__file__).with_name("results.json")


PRODUCT_DIRS = ("ledger", "executors", "projections", "adapters", "migrations")


def code_state() -> dict[str, Any]:
    """The commit and a digest of the product code (to tell whether it changed during a run:
    others edit the tree while benchmarks run)."""
    import hashlib
    import subprocess

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for directory in PRODUCT_DIRS:
        for path in sorted((root / directory).rglob("*")):
            if path.suffix in (".py", ".sql") and path.is_file():
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
    state: dict[str, Any] = {"product_digest": digest.hexdigest()[:16]}
    try:
        state["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                                         text=True, timeout=10).stdout.strip() or None
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *PRODUCT_DIRS], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        state["product_dirty"] = bool(dirty)
    except (OSError, subprocess.SubprocessError):
        state["commit"] = None
    if not state.get("commit") and os.environ.get("OPLEDGER_BENCH_COMMIT"):
        # Run from an exported snapshot (git archive), which has no .git of its own.
        state["commit"] = os.environ["OPLEDGER_BENCH_COMMIT"]
        state["snapshot"] = True
    return state


def machine(postgres_version: str | None) -> dict[str, Any]:
    """What the numbers were measured on."""
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "postgres": postgres_version,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        import psutil

        info["memory_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


def write(results: Sequence[Result], *, path: Path, command: str, options: dict[str, Any],
          machine_info: dict[str, Any], seconds: float, code: dict[str, Any]) -> None:
    document = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "options": options,
        "machine": machine_info,
        "wall_seconds": round(seconds, 1),
        "code": code,
        "results": [r.as_json() for r in results],
    }
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def _fmt(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def table(results: Sequence[Result]) -> str:
    """A plain-text table, one row per result."""
    header = ("scenario", "backend", "workers", "median", "min", "max", "unit", "ratio", "target")
    rows = [header]
    for r in results:
        target = "" if r.met is None else ("met" if r.met else "MISSED") + f" ({r.target})"
        rows.append((r.name, r.backend, "" if r.workers is None else str(r.workers), _fmt(r.stats.median),
                     _fmt(r.stats.min), _fmt(r.stats.max), r.unit,
                     "" if r.ratio is None else f"{r.ratio:.2f}x", target))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) if i in (0, 1, 6, 8) else cell.rjust(widths[i])
                               for i, cell in enumerate(row)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(results: Sequence[Result]) -> str:
    """The same table in Markdown (for docs/performance.md)."""
    lines = ["| scenario | backend | workers | median | min | max | unit | ratio | target |",
             "|---|---|--:|--:|--:|--:|---|--:|---|"]
    for r in results:
        target = "" if r.met is None else ("met" if r.met else "**missed**") + f" ({r.target})"
        lines.append(f"| {r.name} | {r.backend} | {'' if r.workers is None else r.workers} | "
                     f"{_fmt(r.stats.median)} | {_fmt(r.stats.min)} | {_fmt(r.stats.max)} | {r.unit} | "
                     f"{'' if r.ratio is None else f'{r.ratio:.2f}x'} | {target} |")
    return "\n".join(lines)


def command_line() -> str:
    return " ".join([Path(sys.executable).name, "-m", "bench", *sys.argv[1:]])


def _from_json(path: Path) -> list[Result]:
    from bench.harness import Stats

    data = json.loads(path.read_text())
    found = []
    for row in data["results"]:
        stats = Stats(median=row["median"], min=row["min"], max=row["max"], samples=tuple(row.get("samples", ())))
        found.append(Result(name=row["name"], backend=row["backend"], workers=row["workers"], stats=stats,
                            unit=row["unit"], ratio=row["ratio"], baseline=row.get("baseline"), n=row.get("n"),
                            target=row.get("target"), met=row.get("met"), note=row.get("note", ""),
                            extra=row.get("extra", {})))
    return found


if __name__ == "__main__":
    # python -m bench.report [results.json]: the results as a Markdown table (for docs/performance.md).
    print(markdown(_from_json(Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS_PATH)))
