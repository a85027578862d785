"""``opledger archive --out DIR [--before TIME|DURATION] [--nice RATIO] [--dry-run] [--json]``: move closed
operations out of the hot store into verified archive segments (``adapters.archive_run``).

Without ``--before`` each integration's retention policy decides (``OPLEDGER_RETENTION``, or the
declaration's ``retention_seconds``); ``--before`` sets one cutoff for all: a UTC time
(``2026-11-01T00:00:00Z``) or a duration back from now (``30d``). The run can be repeated (from
cron or a timer): it finishes what a killed run left and never archives an id twice. It paces
itself beside live traffic (``--nice``, ``adapters.pacing``): by default it pauses as long as each
step took.

Source: issue 29 item 2.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import typer

from adapters.cli.common import UserErrors, console, counted, errors, fail, print_json, settings
from adapters.pacing import DEFAULT_NICE_RATIO, Pacer
from ledger.clock import SystemClock
from ledger.codec import CODEC_VERSION
from ledger.provenance import build_info
from ledger.retention import cutoff_for, parse_duration
from ledger.store_identity import SCHEMA_VERSION, read_store_identity


def parse_before(text: str, now: datetime) -> datetime:
    """``--before`` as a cutoff: an ISO 8601 time with its offset, or a duration back from ``now``.

    Raises:
        ValueError: neither (a time without an offset is refused: times are UTC).
    """
    try:
        return cutoff_for(now, parse_duration(text))
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--before {text!r} is neither a time (2026-11-01T00:00:00Z) nor a duration "
                         "(90d, 12h, 30m, 45s, 2w, seconds)") from None
    if moment.tzinfo is None:
        raise ValueError(f"--before {text!r} has no UTC offset: write it as 2026-11-01T00:00:00Z")
    return moment


def run(out: Path, before: str | None, dry_run: bool, json_output: bool, database_url: str | None,
        nice: float = DEFAULT_NICE_RATIO) -> None:
    """The ``opledger archive`` run (see the module); prints what was archived."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from adapters.archive_run import run_archive
    from adapters.archive_select import NoRetentionError, cutoffs
    from adapters.runtime import open_store
    from migrations.drivers import archives_of

    chosen = settings(database_url)
    now = SystemClock().now()
    try:
        cutoff = parse_before(before, now) if before is not None else None
    except ValueError as exc:
        fail(str(exc), 2)
    with UserErrors():
        with open_store(chosen, write=not dry_run) as store:
            try:
                limits = cutoffs(store.app.registry, now=now, before=cutoff, store_seconds=chosen.retention_seconds)
                archives = archives_of(store.app)
            except (NoRetentionError, ValueError) as exc:
                fail(str(exc), 2)
            identity = read_store_identity(chosen.database)
            build = build_info()
            provenance = {"identity": identity.get("store_id"), "schema": SCHEMA_VERSION, "codec": CODEC_VERSION,
                          "version": build.version, "commit": build.commit}
            columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
            with Progress(*columns, console=errors, transient=True) as bar:
                task = bar.add_task("archiving", total=None)
                report = run_archive(store.app, store.view, archives, out, now=now, limits=limits,
                                     provenance=provenance, dry_run=dry_run, pacer=Pacer(nice),
                                     progress=lambda n: bar.update(task, description=f"archived {n} operations"))
    if json_output:
        print_json({"out": str(out), **report.as_json()})
        return
    if dry_run:
        console.print(f"would archive {counted(report.operations, 'operation')}"
                      + "".join(f"; {name}: {n}" for name, n in sorted(report.by_integration.items()))
                      + (f"; and {counted(report.receipts, 'expired receipt')}" if report.receipts else ""),
                      markup=False, highlight=False, soft_wrap=True)
        return
    receipts = f" and {counted(report.receipts, 'expired receipt')}" if report.receipts else ""
    receipts_removed = f" and {counted(report.receipts_removed, 'receipt')}" if report.receipts_removed else ""
    console.print(f"archived {counted(report.operations, 'operation')}{receipts} "
                  f"({counted(report.records, 'record')}) into {counted(len(report.segments), 'segment')} under "
                  f"{out}; removed {report.removed}{receipts_removed} from the hot store",
                  markup=False, highlight=False, soft_wrap=True)


def _nice(value: float) -> float:
    """``--nice``: a finite ratio from 0 to 100 (a range check alone calls NaN "above 100")."""
    if not (math.isfinite(value) and 0.0 <= value <= 100.0):
        raise typer.BadParameter(f"must be a number from 0 to 100 (seconds of pause per second of work), got {value}")
    return value


OutOption = typer.Option(None, "--out", help="the archive directory (segments seg-000001, ...); default "
                         "OPLEDGER_ARCHIVE_DIR; one of the two is required to archive")
BeforeOption = typer.Option(None, "--before", help="archive operations closed before this time (ISO 8601 with "
                            "offset) or this long ago (30d); default: each integration's retention policy")
NiceOption = typer.Option(DEFAULT_NICE_RATIO, "--nice", callback=_nice,
                          help="pause this many seconds per second of work, so workers and serve beside the run "
                          "keep their pace (0: flat out, for a store with nothing else running)")
DryRunOption = typer.Option(False, "--dry-run", help="count what would be archived; write and remove nothing")
