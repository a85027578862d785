"""Shared CLI plumbing: settings from flags and environment, error reporting, output."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from ledger.config import Settings
from ledger.errors import LedgerError

console = Console()
errors = Console(stderr=True)

DatabaseOption = typer.Option(None, "--database-url", help="sqlite:///path or postgresql://user@host/db "
                              "(default: $OPLEDGER_DATABASE_URL or sqlite:///.opledger/opledger.db)")
JsonOption = typer.Option(False, "--json", help="print JSON for scripts")


def settings(database_url: str | None = None, **overrides: Any) -> Settings:
    """Settings from ``OPLEDGER_*`` with CLI flags taking precedence."""
    values = {k: v for k, v in overrides.items() if v is not None}
    if database_url is not None:
        values["database_url"] = database_url
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        fail(f"invalid settings: {problems}")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` as an error and exit with ``code``. The message is shown as is, never
    read as Rich markup (it may quote user or provider text)."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def cell(value: Any) -> Text:
    """A table cell showing ``value`` literally (no markup), empty for None."""
    return Text("" if value is None else str(value))


def print_json(data: Any) -> None:
    """Print ``data`` as one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


class UserErrors:
    """Context manager turning ledger errors (user mistakes, misconfiguration) into ``fail``."""

    def __enter__(self) -> UserErrors:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if exc is not None and isinstance(exc, LedgerError):
            fail(str(exc))
        return False
