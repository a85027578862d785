"""Store maintenance commands: ``doctor`` and ``import-json`` (issue 16)."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from adapters.cli.common import DatabaseOption, JsonOption, UserErrors, cell, console, print_json, settings
from ledger.config import Database, Settings
from migrations.drivers import database_driver

_FileArgument = typer.Argument(..., help="the legacy export (format jobstore-export/1, docs/operations.md)")
_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def doctor(
    quick: bool = typer.Option(False, "--quick", help="the quick_check pragma instead of the slower integrity_check"),
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


_DestArgument = typer.Argument(..., help="the new backup file (refused if it exists)")


def backup(dest: Path = _DestArgument, database_url: str = DatabaseOption, json_output: bool = JsonOption) -> None:
    """Back up a running SQLite store into a new file: online backup, 0600, fsynced, checked.

    The copy is checked with quick_check and its identity, and left as one file; FILE must not exist."""
    from adapters.runtime import load_app_class
    from ledger.errors import ConfigurationError, StorePathError
    from ledger.store_files import check_store_files, check_store_path, companion, copy_store
    from ledger.store_identity import check_store_identity

    config = settings(database_url)
    database = config.database
    with UserErrors():
        source = database_driver(database).store_file
        if source is None:
            raise ConfigurationError("opledger backup copies a SQLite store; back up PostgreSQL with pg_dump")
        app_class = load_app_class(config.app)
        check_store_path(source)
        check_store_files(source, thorough=True)
        identity = check_store_identity(database, app_class.name, store_id=config.store_id)
        dest = dest.absolute()
        if dest.exists() or dest.is_symlink():
            raise ConfigurationError(f"{dest} exists; give a new file name")
        try:  # the destination's directory is refused before anything is copied
            check_store_path(dest)
        except StorePathError as exc:
            raise ConfigurationError(str(exc).replace("refusing the store", "refusing the backup file", 1)) from None
        try:
            copy_store(source, dest, replace=False)
        except FileExistsError:
            raise ConfigurationError(f"{dest} exists; give a new file name") from None
        except OSError as exc:
            raise ConfigurationError(f"cannot write the backup {dest}: {exc.strerror or exc}") from None
        try:
            check_store_files(dest, thorough=True)
            check_store_identity(Database.in_file(dest), app_class.name,
                                 store_id=identity["store_id"])
        except BaseException:  # a copy that fails its check is not a backup: leave nothing behind
            for path in (dest, companion(dest, "-wal"), companion(dest, "-shm")):
                path.unlink(missing_ok=True)
            raise
        # The checks' read-only connections leave an empty WAL and its index: one file is the backup.
        wal = companion(dest, "-wal")
        if not wal.exists() or wal.stat().st_size == 0:
            wal.unlink(missing_ok=True)
            companion(dest, "-shm").unlink(missing_ok=True)
    if json_output:
        print_json({"backup": str(dest), "store_id": identity["store_id"], "bytes": dest.stat().st_size})
    else:
        console.print(f"backed up store {identity['store_id']} to {dest} ({dest.stat().st_size} bytes, checked)")


def _project(config: Settings) -> None:
    """Bring the status view up to date with the imported jobs (this process owns the store)."""
    from adapters.runtime import open_store
    from projections.status import StatusProjection

    with open_store(config, write=True) as store:
        StatusProjection(app=store.app, view=store.view).catch_up()


def import_json(
    file: Path = _FileArgument,
    database_url: str = DatabaseOption,
    json_output: bool = JsonOption,
) -> None:
    """Import a legacy JSON job store, once: validate, back up, import into a copy, verify, switch.

    Stop the worker first (the import owns the store). Importing the same file again does nothing."""
    from adapters.runtime import load_app_class
    from ledger.clock import SystemClock
    from migrations.legacy_import import import_json as run_import

    config = settings(database_url)
    with UserErrors():
        report = run_import(config.database, load_app_class(config.app), file, now=SystemClock().now(),
                            store_id=config.store_id)
        if not database_driver(config.database).shared:  # also after an import killed between switch and view
            _project(config)
    if json_output:
        print_json({"imported": report.imported, "skipped": report.skipped, "already_imported": report.already,
                    "backup": str(report.backup) if report.backup else None, "file_sha256": report.file_sha256})
    elif report.already:
        console.print(f"{file} (sha256 {report.file_sha256[:12]}) was imported before: nothing to do")
    else:
        backup = f"; the store before the import is kept at {report.backup}" if report.backup else ""
        console.print(f"imported {report.imported} job(s) from {file} ({report.skipped} already present){backup}")
