"""``opledger serve``'s settings from the environment: where it binds and the callback tolerance;
the workers' callback base URL (issue 12 item 3)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from adapters.http.app import load_serve_settings
from ledger.config import Settings
from ledger.errors import ConfigurationError


def test_bind_address_and_tolerance_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (load_serve_settings().http_host, load_serve_settings().http_port) == ("127.0.0.1", 8000)
    assert load_serve_settings().callback_tolerance_seconds == 300
    monkeypatch.setenv("OPLEDGER_HTTP_HOST", "0.0.0.0")
    monkeypatch.setenv("OPLEDGER_HTTP_PORT", "8765")
    monkeypatch.setenv("OPLEDGER_CALLBACK_TOLERANCE_SECONDS", "60")
    settings = load_serve_settings()
    assert (settings.http_host, settings.http_port, settings.callback_tolerance_seconds) == ("0.0.0.0", 8765, 60)


@pytest.mark.parametrize(("name", "value"), [("OPLEDGER_HTTP_PORT", "70000"),
                                             ("OPLEDGER_CALLBACK_TOLERANCE_SECONDS", "0"),
                                             ("OPLEDGER_CALLBACK_TOLERANCE_SECONDS", "86400")])
def test_a_bad_value_is_refused_with_its_name(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=name):
        load_serve_settings()


@pytest.mark.parametrize("url", ["ftp://ledger.example", "ledger.example", "https://ledger.example/x?y=1"])
def test_a_callback_base_url_must_be_a_plain_http_url(url: str) -> None:
    with pytest.raises(ValidationError, match="callback_base_url"):
        Settings(callback_base_url=url)
    assert Settings(callback_base_url="https://ledger.example/opledger").callback_base_url
