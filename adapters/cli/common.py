"""Shared CLI plumbing: settings from flags and environment, error reporting, output."""

from __future__ import annotations

import json
import sys
from collections.abc import Collection
from typing import Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ledger.config import Settings
from ledger.errors import LedgerError, OperatorActionRefusedError
from ledger.redaction import mask_url

console = Console()
errors = Console(stderr=True)

DatabaseOption = typer.Option(None, "--database-url", help="sqlite:///path or postgresql://user@host/db "
                              "(default: $OPLEDGER_DATABASE_URL or sqlite:///.opledger/opledger.db)")
_FLAG_NAMES = {"worker_threads": "--threads"}
"""Settings whose CLI flag is not ``--field-name``."""
JsonOption = typer.Option(False, "--json", help="print JSON for scripts")
WideOption = typer.Option(False, "--wide", help="never shorten a column (as whenever output is not a terminal)")
WIDE_WIDTH = 100_000
"""Characters a table may take when shortening is off: wider than any row."""


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``counted(1, "segment")`` is ``1 segment``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def settings(database_url: str | None = None, *, warn: bool = True, **overrides: Any) -> Settings:
    """Settings from ``OPLEDGER_*`` with CLI flags taking precedence.

    Args:
        database_url: ``--database-url``, if given.
        warn: print a warning on standard error for each set ``OPLEDGER_*`` variable that
            nothing reads (``adapters.cli.environment``); commands that log (``worker``,
            ``serve``) pass False and call :func:`log_unknown_settings` once logging is set up.
        overrides: other settings given as flags (None: not given).

    Returns:
        The settings.

    Raises:
        typer.Exit: a setting is invalid (code 2, one line naming each).
    """
    values = {k: v for k, v in overrides.items() if v is not None}
    if database_url is not None:
        values["database_url"] = database_url
    try:
        config = Settings(**values)
    except ValidationError as exc:
        fail(f"invalid settings: {settings_problems(exc, flags=set(values))}")
    if warn:
        from adapters.cli.environment import unknown_environment

        for unknown in unknown_environment():
            errors.print(f"warning: {unknown}", markup=False, highlight=False, soft_wrap=True)
    return config


def log_unknown_settings() -> None:
    """Log a warning for each set ``OPLEDGER_*`` variable that nothing reads, with the nearest
    known name (``worker`` and ``serve``, after ``configure_logging``: JSON logs stay JSON).

    Source: issue 34 item 3.
    """
    import structlog

    from adapters.cli.environment import unknown_environment

    log = structlog.get_logger("opledger.settings")
    for unknown in unknown_environment():
        log.warning(str(unknown), variable=unknown.name, did_you_mean=unknown.nearest)


def settings_problems(exc: ValidationError, *, flags: Collection[str] = ()) -> str:
    """One line naming each bad setting as the user wrote it, its value and what is allowed.

    Args:
        exc: the settings' validation error.
        flags: fields given as CLI flags (named ``--field-name``), not from the environment.

    Returns:
        ``OPLEDGER_LEASE_SECONDS='inf': Input should be a finite number; ...``.
    """
    problems = []
    for error in exc.errors():
        field = ".".join(map(str, error["loc"]))
        if field in flags:
            name = _FLAG_NAMES.get(field, f"--{field.replace('_', '-')}")
        else:
            name = f"OPLEDGER_{field.upper()}"
        message = error["msg"].removeprefix("Value error, ")
        value = error.get("input")
        if field == "webhook_secret" or "secret" in field:
            value = "***"
        elif isinstance(value, str) and field.endswith("_url"):
            value = mask_url(value)  # a database URL's password is never printed
        problems.append(f"{name}={value!r}: {message}")
    return "; ".join(problems) + " (limits: docs/guide.md, 'Limits')"


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` as an error and exit with ``code``. The message is shown as is, never
    read as Rich markup (it may quote user or provider text)."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def cell(value: Any) -> Text:
    """A table cell showing ``value`` literally (no markup), empty for None."""
    return Text("" if value is None else str(value))


def print_table(table: Table, *, wide: bool = False) -> None:
    """Print ``table``; fitted to the terminal there, never shortened when ``wide`` or when
    output is not a terminal (a pipe or a file keeps full ids)."""
    if wide or not console.is_terminal:
        # A console of its own: Rich measures a table by its console's width, not print's.
        Console(file=sys.stdout, width=WIDE_WIDTH).print(table)
    else:
        console.print(table)


def print_json(data: Any) -> None:
    """Print ``data`` as one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


class UserErrors:
    """Context manager turning ledger errors into ``fail``: exit code 1 for an action the
    operation's state refuses, 2 for usage, configuration or a missing operation."""

    def __enter__(self) -> UserErrors:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is not None and isinstance(exc, LedgerError):
            fail(str(exc), 1 if isinstance(exc, OperatorActionRefusedError) else 2)
