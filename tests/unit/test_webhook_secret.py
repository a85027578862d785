"""``opledger secret new`` and the secret it makes (issue 34 item 2)."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook
from typer.testing import CliRunner

from adapters.cli.app import app
from adapters.webhook import WebhookAdapter, new_secret, secret_problem
from ledger.clock import FakeClock
from ledger.errors import ConfigurationError

SECRET_LINE = re.compile(r"whsec_[A-Za-z0-9+/]+=*")


def test_a_new_secret_is_the_prefix_and_base64_of_the_random_bytes() -> None:
    secret = new_secret(token_bytes=lambda n: bytes(range(n)))
    assert secret == "whsec_" + base64.b64encode(bytes(range(32))).decode()
    assert secret_problem(secret) is None


@pytest.mark.parametrize("size", [24, 32, 64])
def test_a_new_secret_signs_and_verifies_with_the_standard_webhooks_library(size: int) -> None:
    secret = new_secret(size)
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) == size
    now = datetime.now(UTC)
    signature = Webhook(secret).sign("msg_1", now, '{"ok": true}')
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(now.timestamp())), "webhook-signature": signature}
    assert Webhook(secret).verify('{"ok": true}', headers) == {"ok": True}
    WebhookAdapter(secret=secret, clock=FakeClock()).close()  # accepted where OPLEDGER_WEBHOOK_SECRET goes


@pytest.mark.parametrize("size", [0, 23, 65])
def test_sizes_outside_the_specification_are_refused(size: int) -> None:
    with pytest.raises(ValueError, match="24 to 64"):
        new_secret(size)


def test_the_readme_placeholder_is_refused_with_the_command_that_makes_one() -> None:
    with pytest.raises(ConfigurationError, match=r"make one with `opledger secret new`"):
        WebhookAdapter(secret="whsec_...", clock=FakeClock())


def test_secret_new_prints_only_a_fresh_secret() -> None:
    first, second = (CliRunner().invoke(app, ["secret", "new"]) for _ in range(2))
    assert first.exit_code == second.exit_code == 0
    assert SECRET_LINE.fullmatch(first.stdout.strip()) and first.stdout.count("\n") == 1
    assert first.stdout != second.stdout
    assert secret_problem(first.stdout.strip()) is None


def test_secret_new_json_and_bytes() -> None:
    result = CliRunner().invoke(app, ["secret", "new", "--bytes", "64", "--json"])
    assert result.exit_code == 0
    printed = json.loads(result.stdout)
    assert printed["bytes"] == 64 and len(base64.b64decode(printed["secret"].removeprefix("whsec_"))) == 64


def test_secret_new_refuses_too_few_bytes() -> None:
    assert CliRunner().invoke(app, ["secret", "new", "--bytes", "16"]).exit_code == 2
