"""The interleaved-pairs comparison (bench.pairs): per-pair ratios, ms rows inverted, medians."""

from __future__ import annotations

from typing import Any

from bench.pairs import compare


def _row(name: str, median: float, unit: str = "ops/s", backend: str = "postgres") -> dict[str, Any]:
    return {"name": name, "backend": backend, "workers": 2, "median": median, "unit": unit}


def _run(pair: int, side: str, *rows: dict[str, Any]) -> dict[str, Any]:
    return {"pair": pair, "side": side, "results": list(rows)}


def test_each_pair_is_its_own_ratio_and_the_verdict_is_their_median() -> None:
    runs = [_run(0, "base", _row("drain", 100)), _run(0, "head", _row("drain", 90)),
            _run(1, "head", _row("drain", 220)), _run(1, "base", _row("drain", 200)),
            _run(2, "base", _row("drain", 50)), _run(2, "head", _row("drain", 50))]
    [row] = compare(runs)
    assert row["ratios"] == [0.9, 1.1, 1.0] and row["median"] == 1.0 and not row["control"]


def test_a_latency_row_is_better_when_lower_so_its_ratio_is_inverted() -> None:
    runs = [_run(0, "base", _row("pickup.p99", 10, "ms")), _run(0, "head", _row("pickup.p99", 20, "ms"))]
    assert compare(runs)[0]["median"] == 0.5


def test_a_row_missing_on_one_side_or_zero_is_left_out_and_third_party_rows_are_controls() -> None:
    runs = [_run(0, "base", _row("drain", 100), _row("procrastinate.drain", 10), _row("e2e", 0)),
            _run(0, "head", _row("drain", 100), _row("procrastinate.drain", 12), _row("e2e", 5),
                 _row("drain.wire", 9))]
    rows = {r["name"]: r for r in compare(runs)}
    assert set(rows) == {"drain", "procrastinate.drain"}
    assert rows["procrastinate.drain"]["control"] and rows["procrastinate.drain"]["median"] == 1.2
