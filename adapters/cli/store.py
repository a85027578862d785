"""Store maintenance commands: ``doctor`` (and, with issue 16, ``import-json``)."""

from __future__ import annotations

import logging

import typer
from rich.table import Table
from rich.text import Text

from adapters.cli.common import DatabaseOption, JsonOption, UserErrors, cell, console, print_json, settings

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def doctor(
    quick: bool = typer.Option(False, "--quick", help="PRAGMA quick_check instead of the slower integrity_check"),
    database_url: str = DatabaseOption,
    json_output: bool = JsonOption,
) -> None:
    """Check the store without changing it: files, permissions, integrity, identity, the log, the view.

    Exit code 0 when every check passes (warnings allowed), 1 when one fails, 2 for a usage error."""
    from adapters.doctor import run_doctor
    from adapters.logs import configure_logging

    config = settings(database_url)
    # What the scratch rebuild would log (a record that does not decode) is in the report.
    configure_logging(config.log_format, level=logging.CRITICAL)
    with UserErrors():
        report = run_doctor(config, quick=quick)
    if json_output:
        print_json(report.as_json())
    else:
        table = Table(title=f"opledger doctor: {report.store}")
        for column in ("check", "status", "detail"):
            table.add_column(column)
        for finding in report.findings:
            table.add_row(cell(finding.name), Text(finding.status, style=_STYLE[finding.status]),
                          cell(finding.detail))
        console.print(table)
        console.print("healthy" if report.ok else "[bold red]problems found[/]")
    raise typer.Exit(0 if report.ok else 1)
