"""``opledger --version`` and ``-h`` (issue 34 item 7)."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from adapters.cli.app import app


def test_version_prints_the_installed_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"opledger {version('opledger')}"


@pytest.mark.parametrize("args", [["-h"], ["worker", "-h"], ["ops", "list", "-h"], ["serve", "--help"]])
def test_h_is_help_everywhere(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "Usage: opledger" in result.output
