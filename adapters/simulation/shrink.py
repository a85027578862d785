"""Failing seeds, made small and replayable.

A run already stops at the first step that breaks an invariant, so its trace is the shortest
prefix that fails. :func:`shrink` then removes faults one at a time (latest first): a fault
whose removal still breaks the same invariant, with fewer faults in all, stays removed. What is left is written as a
reproducer (:func:`write_reproducer`) that ``opledger simulate --replay FILE`` runs again; a
bug it found becomes a regression test by keeping that file or its seed.

Source: issue 11 ("failing seeds shrink").
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from adapters.simulation.run import RunResult, SimConfig, run_seed
from ledger.errors import ConfigurationError

FORMAT = "opledger-simulation/1"
MAX_SHRINK_RUNS = 200
"""Re-runs one shrink may take at most."""


def shrink(result: RunResult, *, max_runs: int = MAX_SHRINK_RUNS) -> RunResult:
    """The same seed with as few faults as still break the same invariant.

    Args:
        result: a failing run (``result.violation`` is set).
        max_runs: re-runs allowed.

    Returns:
        The smallest failing run found (``result`` itself when no fault could be removed).

    Raises:
        ValueError: ``result`` did not fail.
    """
    if result.violation is None:
        raise ValueError("only a failing run can be shrunk")
    best, disabled = result, set(result.config.disabled)
    for number, _ in reversed(result.injected):
        if max_runs <= 0:
            break
        max_runs -= 1
        trial = run_seed(result.seed, replace(result.config, disabled=frozenset(disabled | {number})))
        # Removing one fault changes what the seed draws next, so a run can come back with more
        # faults than before: only a failure with fewer faults is smaller.
        if (trial.violation is not None and trial.violation.invariant == result.violation.invariant
                and len(trial.injected) < len(best.injected)):
            disabled.add(number)
            best = trial
    return best


def reproducer(result: RunResult) -> dict[str, Any]:
    """The JSON-ready description of a run that ``--replay`` repeats exactly."""
    config = result.config
    return {
        "format": FORMAT,
        "seed": result.seed,
        "operations": config.operations,
        "steps": config.steps,
        "workers": config.workers,
        "disabled_faults": sorted(config.disabled),
        "violation": str(result.violation) if result.violation else None,
        "faults": [f"{number}:{kind.value}" for number, kind in result.injected],
    }


def write_reproducer(result: RunResult, directory: Path) -> Path:
    """Write :func:`reproducer` to ``directory/seed-<seed>.json``; returns the path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"seed-{result.seed}.json"
    path.write_text(json.dumps(reproducer(result), indent=2) + "\n")
    return path


def read_reproducer(path: Path) -> tuple[int, SimConfig]:
    """The seed and configuration a reproducer file names.

    Raises:
        ConfigurationError: the file is missing, is not JSON, or is not a reproducer.
    """
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"format is {data.get('format')!r}, expected {FORMAT!r}")
        return int(data["seed"]), SimConfig(operations=int(data["operations"]), steps=int(data["steps"]),
                                            workers=int(data["workers"]),
                                            disabled=frozenset(int(n) for n in data["disabled_faults"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigurationError(f"{path} is not a simulation reproducer: {exc}") from None
