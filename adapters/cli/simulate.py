"""``opledger simulate``: the deterministic simulator from the command line (docs/simulation.md)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import typer
from rich.table import Table

from adapters.cli.common import JsonOption, UserErrors, cell, console, errors, print_json

FAILURES_DIR = Path("simulation-failures")
ReplayOption = typer.Option(None, help="run the reproducer FILE written for a failing seed, print its trace")
OutOption = typer.Option(FAILURES_DIR, help="directory for reproducers of failing seeds")


def simulate(
    seeds: int = typer.Option(100, min=1, help="how many seeds to run"),
    start: int = typer.Option(0, min=0, help="the first seed"),
    steps: int = typer.Option(400, min=1, max=100_000, help="steps of each run's fault phase"),
    workers: int = typer.Option(2, min=1, max=16, help="worker processes in each run"),
    operations: int = typer.Option(20, min=1, max=10_000, help="intents in each run"),
    replay: Path = ReplayOption,
    trace: bool = typer.Option(False, "--trace", help="print each run's trace (one seed at a time is best)"),
    out: Path = OutOption,
    json_output: bool = JsonOption,
) -> None:
    """Run the real aggregate and executor services against simulated providers, crashes and
    time, seed by seed, and check every step with the oracle. Exit code 1 when a seed fails;
    its shrunk trace is printed and a reproducer written for --replay."""
    from adapters.logs import configure_logging
    from adapters.simulation.campaign import run_campaign
    from adapters.simulation.run import RunResult, SimConfig, run_seed
    from adapters.simulation.shrink import read_reproducer, write_reproducer

    configure_logging("console", level=logging.CRITICAL)  # the services' warnings are the run's faults
    if replay is not None:
        with UserErrors():
            seed, config = read_reproducer(replay)
        result = run_seed(seed, config)
        if json_output:
            print_json({"seed": seed, "violation": str(result.violation) if result.violation else None,
                        "trace": result.trace})
        else:
            console.print("\n".join(result.trace), highlight=False, markup=False)
            _verdict(result)
        raise typer.Exit(1 if result.violation else 0)

    config = SimConfig(operations=operations, steps=steps, workers=workers)

    def failed(run: RunResult) -> None:
        path = write_reproducer(run, out)
        if not json_output:
            errors.print(f"[bold red]seed {run.seed} failed:[/] {run.violation}", highlight=False)
            errors.print("\n".join(run.trace[-40:]), highlight=False, markup=False)
            errors.print(f"reproducer: {path} (opledger simulate --replay {path})", highlight=False)

    campaign = run_campaign(range(start, start + seeds), config, on_failure=failed)

    def pipe_closed() -> None:  # Rich's default exits 1 here, the code of a failing seed
        raise BrokenPipeError

    console.on_broken_pipe = pipe_closed
    try:
        if trace and not json_output:
            for seed in range(start, start + seeds):
                console.print("\n".join(run_seed(seed, config).trace), highlight=False, markup=False)
        if json_output:
            print_json(campaign.as_json())
        else:
            _report(campaign)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (`| head`): not a failing seed. Python's docs: point stdout at
        # devnull so the flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise typer.Exit(1 if campaign.failures else 0)


def _report(campaign) -> None:  # type: ignore[no-untyped-def]  # Campaign, imported lazily
    faults = Table("fault", "injected", title="faults injected")
    for kind, count in sorted(campaign.faults.items()):
        faults.add_row(cell(kind), cell(count))
    honesty = Table("delivery mode", "strong", "ambiguous, applied", "ambiguous, not applied",
                    "of those, lookup possible", "cancelled", "other", title="how operations ended")
    for mode, row in sorted(campaign.honesty.items()):
        honesty.add_row(cell(mode), *(cell(row.get(key, 0)) for key in
                                      ("strong", "weak_applied", "weak_not_applied", "weak_lookup", "cancelled",
                                       "other")))
    console.print(faults)
    console.print(honesty)
    verdict = f"{len(campaign.failures)} failed" if campaign.failures else "all passed"
    console.print(f"{campaign.seeds} seeds, {campaign.operations} operations in {campaign.wall_seconds:.1f} s "
                  f"({campaign.operations_per_second:.0f} operations/s): {verdict}", highlight=False)


def _verdict(result) -> None:  # type: ignore[no-untyped-def]  # RunResult, imported lazily
    if result.violation is None:
        console.print(f"seed {result.seed}: no invariant broken", highlight=False)
    else:
        errors.print(f"[bold red]seed {result.seed} failed:[/] {result.violation}", highlight=False)
