"""Settings that cannot work are refused at start, and the CLI says so in one line with exit 2.

Source: issue 10 item 3 ("settings like OPLEDGER_LEASE_SECONDS=inf or a poll interval of 1e9
are refused at start"); ledger/config.py; adapters/cli/common.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from adapters.cli.app import app as cli
from ledger.config import Settings

REPO = Path(__file__).resolve().parents[2]

BAD = [
    ("OPLEDGER_LEASE_SECONDS", "inf", "finite number"),
    ("OPLEDGER_LEASE_SECONDS", "nan", "finite number"),
    ("OPLEDGER_LEASE_SECONDS", "0", "greater than 0"),
    ("OPLEDGER_LEASE_SECONDS", "1e9", "less than or equal to 3600"),
    ("OPLEDGER_LEASE_SECONDS", "-infinity", "finite number"),
    ("OPLEDGER_POLL_INTERVAL_SECONDS", "1e9", "less than or equal to 60"),
    ("OPLEDGER_POLL_INTERVAL_SECONDS", "inf", "finite number"),
    ("OPLEDGER_POLL_INTERVAL_SECONDS", "0", "greater than 0"),
    ("OPLEDGER_POLL_INTERVAL_SECONDS", "20", "at most a third of lease_seconds (30 s)"),
    ("OPLEDGER_GRACE_SECONDS", "-1", "greater than or equal to 0"),
    ("OPLEDGER_GRACE_SECONDS", "nan", "finite number"),
    ("OPLEDGER_GRACE_SECONDS", "1e6", "less than or equal to 900"),
    ("OPLEDGER_WORKER_THREADS", "0", "greater than or equal to 1"),
    ("OPLEDGER_WORKER_THREADS", "100000", "less than or equal to 1024"),
    ("OPLEDGER_EGRESS_PER_HOST", "0", "greater than or equal to 1"),
    ("OPLEDGER_EGRESS_PER_HOST", "100000", "less than or equal to 65536"),
    ("OPLEDGER_EGRESS_SLOTS", "0", "greater than or equal to 1"),
    ("OPLEDGER_EGRESS_SLOTS", "100000", "less than or equal to 65536"),
    ("OPLEDGER_BATCH_SIZE", "0", "greater than or equal to 1"),
    ("OPLEDGER_BATCH_SIZE", "1e9", "valid integer"),
    ("OPLEDGER_BATCH_SIZE", "10000001", "less than or equal to 10000"),
]
IDS = [f"{name.removeprefix('OPLEDGER_').lower()}={value}" for name, value, _ in BAD]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OPLEDGER_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(("name", "value", "message"), BAD, ids=IDS)
def test_settings_that_cannot_work_are_refused(name: str, value: str, message: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=re.escape(message)):
        Settings()


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"OPLEDGER_LEASE_SECONDS": "3600", "OPLEDGER_POLL_INTERVAL_SECONDS": "60", "OPLEDGER_GRACE_SECONDS": "900"},
        {"OPLEDGER_LEASE_SECONDS": "1", "OPLEDGER_POLL_INTERVAL_SECONDS": "0.05", "OPLEDGER_GRACE_SECONDS": "0"},
        {"OPLEDGER_WORKER_THREADS": "256", "OPLEDGER_BATCH_SIZE": "10000"},
    ],
    ids=["defaults", "at-the-maxima", "process-test-settings", "threads-and-batch-at-max"],
)
def test_settings_within_the_limits_are_accepted(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    Settings()


@pytest.mark.parametrize("command", [["worker"], ["demo"], ["ops", "list"], ["attention"], ["migrate"]])
@pytest.mark.parametrize(("name", "value", "message"), [BAD[0], BAD[5]], ids=[IDS[0], IDS[5]])
def test_cli_prints_one_line_and_exits_2(command: list[str], name: str, value: str, message: str) -> None:
    result = CliRunner().invoke(cli, command, env={name: value})
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: invalid settings: {name}='{value}': ")
    assert message in lines[0] and "docs/guide.md" in lines[0]


def test_cli_names_the_flag_when_the_flag_is_wrong() -> None:
    result = CliRunner().invoke(cli, ["worker", "--lease-seconds", "inf", "--threads", "0"])
    assert result.exit_code == 2, result.output
    assert "--lease-seconds=inf: Input should be a finite number" in result.output
    assert "--threads=0: " in result.output


def test_worker_process_refuses_an_infinite_lease_without_a_traceback(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPLEDGER_")}
    env.update({"OPLEDGER_LEASE_SECONDS": "inf", "OPLEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
                "PYTHONPATH": str(REPO), "COLUMNS": "200"})
    done = subprocess.run([sys.executable, "-m", "adapters.cli", "worker"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: invalid settings: OPLEDGER_LEASE_SECONDS='inf': Input should be a finite number "
        "(limits: docs/guide.md, 'Limits')"]
    assert not (tmp_path / "x.db").exists(), "nothing was opened"
