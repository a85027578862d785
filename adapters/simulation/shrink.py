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
    """The seed and configuration a reproducer file names, checked against the limits
    ``opledger simulate`` takes (a hand-edited file must not pass for a real failure).

    Raises:
        ConfigurationError: the file is missing, is not JSON, is not a reproducer, or holds a
            value out of range; the message names the field.
    """
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigurationError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep to decode
        raise ConfigurationError(f"{path} is not a simulation reproducer: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ConfigurationError(f"{path} is not a simulation reproducer: format is {found!r}, expected {FORMAT!r}")
    limits = {"seed": (0, None), "operations": (1, 10_000), "steps": (1, 100_000), "workers": (1, 16)}
    values: dict[str, int] = {}
    for name, (low, high) in limits.items():
        value = data.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
            allowed = f"a whole number from {low}" + (f" to {high}" if high is not None else " up")
            raise ConfigurationError(f"{path} is not a simulation reproducer: {name} must be {allowed}, got {value!r}")
        values[name] = value
    disabled = data.get("disabled_faults", [])
    if not isinstance(disabled, list) or not all(isinstance(n, int) and n >= 0 for n in disabled):
        raise ConfigurationError(f"{path} is not a simulation reproducer: disabled_faults must be a list of "
                                 f"fault numbers, got {disabled!r}")
    return values["seed"], SimConfig(operations=values["operations"], steps=values["steps"],
                                     workers=values["workers"], disabled=frozenset(disabled))
