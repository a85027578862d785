"""Simulation speed: seeds and simulated operations per second of CPU time, one core.

Runs ``adapters.simulation.run_seed`` over N seeds of the default configuration (20 operations
each), ``repeat`` times, in this process. The target (issue 11) is at least 1,000 simulated
operations per second on one core, so that 10,000 seeds fit in a few minutes. CPU time of this
process, not wall time, so a busy machine skews it less.
"""

from __future__ import annotations

import logging
import time

from bench.harness import Options, Result, Stats

TARGET_OPS_PER_SECOND = 1000.0


def run(options: Options, log=print) -> list[Result]:
    import structlog

    from adapters.simulation import SimConfig, run_seed

    # The services log each injected fault; formatting those lines is not the simulator's cost.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    seeds = options.size(300, 10)
    per_op: list[float] = []
    per_seed: list[float] = []
    for rep in range(options.repetitions):
        began, operations = time.process_time(), 0
        for seed in range(seeds):
            operations += run_seed(seed, SimConfig()).operations
        cpu = time.process_time() - began
        per_op.append(operations / cpu)
        per_seed.append(seeds / cpu)
        log(f"  simulation rep {rep + 1}: {seeds} seeds, {operations} operations in {cpu:.2f} s CPU: "
            f"{operations / cpu:,.0f} operations/s, {seeds / cpu:,.1f} seeds/s")
    ops = Stats.of(per_op)
    return [
        Result(name="simulation.operations", backend="memory", workers=None, stats=ops, unit="ops/s (CPU)",
               n=seeds, target=f"≥ {TARGET_OPS_PER_SECOND:,.0f} simulated operations/s on one core",
               met=ops.median >= TARGET_OPS_PER_SECOND, note="20 operations, 400 steps, 2 workers per seed"),
        Result(name="simulation.seeds", backend="memory", workers=None, stats=Stats.of(per_seed),
               unit="seeds/s (CPU)", n=seeds),
    ]
