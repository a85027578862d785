"""The benchmark runner runs end to end at tiny sizes, so it cannot rot. Never a timed assertion:
it only checks that every scenario ran and reported its figures (issue: benchmarks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.wire import nginx_binary
from tests.conftest import require_postgres

REPO = Path(__file__).resolve().parents[2]
FIELDS = {"name", "backend", "workers", "median", "min", "max", "unit", "ratio"}

pytestmark = [pytest.mark.process, pytest.mark.postgres]


@pytest.mark.slow
def test_bench_smoke_run_writes_every_scenario(tmp_path: Path) -> None:
    require_postgres()
    output = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "bench", "--smoke", "--output", str(output)],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    document = json.loads(output.read_text())
    results = document["results"] if isinstance(document, dict) else document
    names = {r["name"].split(".")[0] for r in results}
    assert {"cocommit", "drain", "e2e", "procrastinate", "projection", "recovery", "memory", "simulation",
            "pickup"} <= names, names
    rows = {r["name"] for r in results}
    if nginx_binary() is not None or os.environ.get("CI"):  # CI installs nginx (.ci/run)
        assert {"drain.wire", "client.bare"} <= rows, rows
        wire = next(r for r in results if r["name"] == "drain.wire")
        assert wire["ratio"] is not None and wire["extra"]["vs_client_bare"] is not None
    else:
        assert "drain.wire" not in rows and "nginx is not installed" in run.stdout
    for result in results:
        assert FIELDS <= set(result), result
        assert result["median"] is not None and result["min"] <= result["median"] <= result["max"]


def test_bench_history_smoke_preloads_and_reports_every_big_store_row(tmp_path: Path) -> None:
    # The opt-in big-store scenario (issue 29 item 6) at smoke size: a preload of closed
    # operations, then the e2e ratio, the four reads, an archive run of the preloaded ones and
    # the sizes, on both backends.
    require_postgres()
    output = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "bench", "--only", "history", "--smoke", "--output", str(output)],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads(output.read_text())["results"]
    reads = [f"history.read.{name}" for name in ("list", "attention", "timeline", "metrics")]
    for backend in ("postgres", "sqlite"):
        rows = {r["name"]: r for r in results if r["backend"] == backend}
        assert {"history.e2e", "history.size", "history.archive", *reads} <= set(rows), rows
        assert rows["history.e2e"]["ratio"] > 0 and rows["history.e2e"]["extra"]["preloaded"] == 300
        archived = rows["history.archive"]
        assert archived["extra"]["report"]["operations"] == archived["extra"]["report"]["removed"] == 300, archived
        assert archived["median"] > 0 and (archived["ratio"] is None) == bool(archived.get("note")), archived
        for name in reads:
            extra = rows[name]["extra"]
            assert 0 < extra["p50_ms"] <= extra["p99_ms"], rows[name]
        sizes = rows["history.size"]["extra"]["bytes"]
        full = {"after_vacuum_full"} if backend == "postgres" else set()
        assert set(sizes) == {"after_preload", "after_e2e", "after_archive", "after_vacuum", "fresh", *full}, sizes
        assert min(sizes.values()) > 0
        size = rows["history.size"]
        if size["extra"]["tables_after_reclaim"]:  # SQLite without dbstat cannot say
            assert size["extra"]["archive_index_bytes"] > 0 and size["ratio"] > 0, size
            assert "opledger_archived_operations" in size["extra"]["tables_after_reclaim"], size
