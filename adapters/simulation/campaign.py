"""Many seeds: run them, add up what they did, keep the failures (shrunk).

Source: issue 11 (``opledger simulate --seeds N``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from adapters.simulation.run import RunResult, SimConfig, run_seed
from adapters.simulation.shrink import reproducer, shrink


@dataclass
class Campaign:
    """What a set of seeds did.

    Attributes:
        seeds: seeds run.
        operations: operations simulated, in all.
        faults: faults injected, by kind.
        honesty: per delivery mode, how operations ended against the truth (``Oracle.honesty``).
        failures: each failing run, shrunk.
        wall_seconds: wall-clock time of the runs (not of the shrinking).
    """

    seeds: int = 0
    operations: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    honesty: dict[str, Counter[str]] = field(default_factory=dict)
    failures: list[RunResult] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def operations_per_second(self) -> float:
        """Simulated operations per second of wall time."""
        return self.operations / self.wall_seconds if self.wall_seconds else 0.0

    def as_json(self) -> dict[str, Any]:
        """The campaign as JSON-ready data."""
        return {
            "seeds": self.seeds,
            "operations": self.operations,
            "wall_seconds": round(self.wall_seconds, 3),
            "operations_per_second": round(self.operations_per_second, 1),
            "faults": dict(sorted(self.faults.items())),
            "honesty": {mode: dict(sorted(row.items())) for mode, row in sorted(self.honesty.items())},
            "failures": [reproducer(run) for run in self.failures],
        }


def run_campaign(seeds: Iterable[int], config: SimConfig, *, shrink_failures: bool = True,
                 on_failure: Callable[[RunResult], None] | None = None) -> Campaign:
    """Run every seed in ``seeds`` with ``config``.

    Args:
        seeds: the seeds, in order.
        config: each run's :class:`SimConfig`.
        shrink_failures: shrink each failing run (``shrink.shrink``) before keeping it.
        on_failure: called with each (shrunk) failing run as it is found.

    Returns:
        :class:`Campaign`.
    """
    campaign = Campaign()
    for seed in seeds:
        began = time.perf_counter()
        result = run_seed(seed, config)
        campaign.wall_seconds += time.perf_counter() - began
        campaign.seeds += 1
        campaign.operations += result.operations
        campaign.faults.update(result.faults)
        for mode, row in result.honesty.items():
            campaign.honesty.setdefault(mode, Counter()).update(row)
        if result.violation is not None:
            failed = shrink(result) if shrink_failures else result
            campaign.failures.append(failed)
            if on_failure is not None:
                on_failure(failed)
    return campaign
