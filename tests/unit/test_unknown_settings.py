"""Unknown ``OPLEDGER_*`` variables are reported at start with the nearest known name, as a
warning (issue 34 item 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adapters.cli.app import app
from adapters.cli.environment import FAMILIES, known_names, unknown_environment
from ledger.config import Settings
from ledger.setting_names import UnknownSetting, env_names, unknown_settings

REPO = Path(__file__).resolve().parents[2]


def test_env_names_are_the_prefixed_fields() -> None:
    names = env_names(Settings)
    assert {"OPLEDGER_DATABASE_URL", "OPLEDGER_LEASE_SECONDS", "OPLEDGER_WEBHOOK_SECRET"} <= names
    assert len(names) == len(Settings.model_fields)


@pytest.mark.parametrize(("name", "nearest"), [
    ("OPLEDGER_LEASE_SECOND", "OPLEDGER_LEASE_SECONDS"),
    ("OPLEDGER_DATABASE_URI", "OPLEDGER_DATABASE_URL"),
    ("OPLEDGER_WEBHOOKSECRET", "OPLEDGER_WEBHOOK_SECRET"),
    ("OPLEDGER_HTTP_MAX_CONNECTION", "OPLEDGER_HTTP_MAX_CONNECTIONS"),  # HttpLimits
    ("OPLEDGER_RECEIPT_RETENTION", "OPLEDGER_RECEIPT_RETENTION_SECONDS"),  # ReceiptSettings
    ("OPLEDGER_API_TOKEN", "OPLEDGER_API_TOKENS"),  # ServeSettings
    ("OPLEDGER_SECERT_CARD", "OPLEDGER_SECRET_CARD"),  # the secrets' family
    ("OPLEDGER_ZZZ", None),
])
def test_an_unknown_variable_is_named_with_the_nearest_known_one(name: str, nearest: str | None) -> None:
    assert unknown_environment({name: "5", "PATH": "/bin"}) == [UnknownSetting(name=name, nearest=nearest)]


def test_every_read_variable_is_known() -> None:
    environ = {name: "x" for name in known_names()}
    environ |= {"OPLEDGER_SECRET_CARD": "x", "OPLEDGER_SECRET_CALLBACK_PAYMENTS_CHARGE": "x",
                "OPLEDGER_TEST_POSTGRES_URL": "x", "OPLEDGER_BENCH_COMMIT": "x", "opledger_lease_seconds": "5",
                "OPLEDGER_FAILPOINT": "x", "OPLEDGER_PARTNER_SECRET": "x", "HOME": "/root"}
    assert unknown_environment(environ) == []
    assert {"OPLEDGER_HTTP_HOST", "OPLEDGER_HTTP_KEEP_ALIVE_SECONDS", "OPLEDGER_RECEIPT_MAX_BODY_BYTES",
            "OPLEDGER_TRACE_URL_TEMPLATE"} <= known_names()


def test_the_message_says_it_is_ignored() -> None:
    [unknown] = unknown_settings({"OPLEDGER_LEASE_SECOND": "5"}, known={"OPLEDGER_LEASE_SECONDS"})
    assert str(unknown) == ("OPLEDGER_LEASE_SECOND is not an opledger setting and is ignored; "
                            "did you mean OPLEDGER_LEASE_SECONDS?")
    assert unknown_settings({"OPLEDGER_SECRET_X": "v"}, known=set(), prefixes=FAMILIES) == []


def test_a_command_warns_on_standard_error_and_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPLEDGER_LEASE_SECOND", "5")
    result = CliRunner().invoke(app, ["ops", "list", "--json", "--database-url", "sqlite:////nonexistent/x.db"])
    assert result.stderr.splitlines()[0] == ("warning: OPLEDGER_LEASE_SECOND is not an opledger setting and is "
                                             "ignored; did you mean OPLEDGER_LEASE_SECONDS?")
    assert "OPLEDGER_LEASE_SECOND" not in result.stdout  # stdout stays for --json


def test_the_worker_logs_it_as_a_structured_warning(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPLEDGER_")}
    env |= {"OPLEDGER_LEASE_SECOND": "5", "OPLEDGER_LOG_FORMAT": "json", "PYTHONPATH": str(REPO),
            "OPLEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'missing.db'}"}
    result = subprocess.run([sys.executable, "-m", "adapters.cli", "worker"], env=env, capture_output=True,
                            text=True, timeout=60)
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert {"variable": "OPLEDGER_LEASE_SECOND", "did_you_mean": "OPLEDGER_LEASE_SECONDS",
            "level": "warning"}.items() <= logged[0].items()
    assert result.returncode == 2 and "no store at" in result.stderr  # it went on to start, and stopped there
