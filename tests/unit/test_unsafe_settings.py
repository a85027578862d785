"""Unsafe settings are refused at start with one line: short or empty API tokens, secrets too
short to redact safely, a bind beyond loopback without ``--public``.

Source: issue 27 item 3; adapters/http/app.py (``MIN_TOKEN_CHARS``, ``check_bind``);
executors/secrets.py (``MIN_SECRET_CHARS``, ``check_environment_secrets``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs
from typer.testing import CliRunner

from adapters.cli.app import app as cli
from adapters.http.app import MIN_TOKEN_CHARS, OPEN_METRICS_WARNING, check_bind, load_serve_settings
from executors.secrets import MIN_SECRET_CHARS, FileSecrets, MissingSecretError, check_environment_secrets
from ledger.errors import ConfigurationError

LONG_TOKEN = "t" * MIN_TOKEN_CHARS
LONG_SECRET = "s" * MIN_SECRET_CHARS


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OPLEDGER_"):
            monkeypatch.delenv(name)


def _tokens(*tokens: str) -> str:
    return json.dumps({token: {"principal": f"p{i}", "roles": ["viewer"]} for i, token in enumerate(tokens)})


# --- API tokens ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("token", "size"), [("", "an empty token"), ("x", "a token of 1 character"),
                                             ("abc", "a token of 3 characters"),
                                             ("secret-15-chars", "a token of 15 characters")],
                         ids=["empty", "one", "three", "fifteen"])
def test_a_short_token_is_refused_without_quoting_it(token: str, size: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPLEDGER_API_TOKENS", _tokens(LONG_TOKEN, token))
    with pytest.raises(ConfigurationError) as refused:
        load_serve_settings()
    message = str(refused.value)
    assert f"OPLEDGER_API_TOKENS: {size} (principal 'p1') is shorter than 16" in message
    assert "secrets.token_urlsafe(32)" in message and "\n" not in message
    assert "'p0'" not in message, "a long enough token is not named"
    if token:
        assert token not in message


@pytest.mark.parametrize("token", [LONG_TOKEN + " ", " " + LONG_TOKEN, LONG_TOKEN[:8] + '"' + LONG_TOKEN[8:],
                                   LONG_TOKEN + "\t", LONG_TOKEN + "=x"], ids=["trailing", "leading", "quote", "tab", "pad"])
def test_a_token_no_client_could_present_is_refused(token: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # RFC 6750 §2.1: a bearer token is letters, digits, -._~+/ and trailing '='; this one would
    # lock its principal out, since a presented token never carries the space or the quote.
    monkeypatch.setenv("OPLEDGER_API_TOKENS", _tokens(LONG_TOKEN, token))
    with pytest.raises(ConfigurationError) as refused:
        load_serve_settings()
    message = str(refused.value)
    assert "a token (principal 'p1') holds a character a bearer token cannot (RFC 6750" in message
    assert token.strip() not in message and "'p0'" not in message


def test_a_role_named_twice_is_refused_naming_the_principal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPLEDGER_API_TOKENS", json.dumps(
        {LONG_TOKEN: {"principal": "alice", "roles": ["operator", "viewer", "operator"]}}))
    with pytest.raises(ConfigurationError, match="the token \\(principal 'alice'\\) names the role operator more than once"):
        load_serve_settings()


def test_tokens_of_16_characters_or_more_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPLEDGER_API_TOKENS", _tokens(LONG_TOKEN, "u" * 43))
    assert sorted(load_serve_settings().api_tokens) == [LONG_TOKEN, "u" * 43]


# --- the bind -----------------------------------------------------------------------------------

LOOPBACK = ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "::ffff:127.0.0.1", "localhost", "LOCALHOST", "localhost."]
PUBLIC = ["0.0.0.0", "::", "10.0.0.5", "192.168.1.20", "2001:db8::1", "ledger.example", "localhost.example",
          "my-host", ""]


@pytest.mark.parametrize("host", LOOPBACK)
@pytest.mark.parametrize("public", [False, True])
def test_a_loopback_bind_is_accepted(host: str, public: bool) -> None:
    assert check_bind(host, public=public) is False, "nothing to warn about"


@pytest.mark.parametrize("host", PUBLIC)
def test_a_public_bind_is_refused_without_public(host: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        check_bind(host, public=False)
    message = str(refused.value)
    assert f"refusing to bind {host!r}" in message and "\n" not in message
    assert "/metrics and /health answer there without a token" in message and "every tenant" in message
    assert "--public" in message and "OPLEDGER_HTTP_PUBLIC=true" in message


@pytest.mark.parametrize("host", PUBLIC)
def test_a_public_bind_is_accepted_with_public_and_warned_about(host: str) -> None:
    assert check_bind(host, public=True) is True


def test_http_public_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_serve_settings().http_public is False
    monkeypatch.setenv("OPLEDGER_HTTP_PUBLIC", "true")
    assert load_serve_settings().http_public is True


# --- secrets ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "length"), [("", "empty"), ("x", "1 character long"),
                                               ("tok_123", "7 characters long")], ids=["empty", "one", "seven"])
def test_a_short_secret_is_refused_by_name(value: str, length: str) -> None:
    environ = {"OPLEDGER_SECRET_CARD": value, "OPLEDGER_SECRET_LONG": LONG_SECRET, "HOME": "/"}
    with pytest.raises(ConfigurationError) as refused:
        check_environment_secrets(environ)
    message = str(refused.value)
    assert message.startswith(f"OPLEDGER_SECRET_CARD is {length}, shorter than 8: ") and "\n" not in message
    assert "OPLEDGER_SECRET_LONG" not in message
    if value:
        assert f"{value}," not in message and f"'{value}'" not in message


def test_every_short_secret_is_named_in_one_line() -> None:
    with pytest.raises(ConfigurationError, match="OPLEDGER_SECRET_A is 1 character long, shorter than 8; "
                                                 "OPLEDGER_SECRET_B is 2 characters long, shorter than 8: "):
        check_environment_secrets({"OPLEDGER_SECRET_B": "bb", "OPLEDGER_SECRET_A": "a"})


def test_secrets_of_8_characters_or_more_are_accepted() -> None:
    check_environment_secrets({"OPLEDGER_SECRET_CARD": LONG_SECRET, "OPLEDGER_SECRET_DEMO_CARD": "tok_demo_4242",
                               "OPLEDGER_LOG_FORMAT": "json", "OTHER": "x"})


def test_a_short_secret_file_is_refused_when_resolved(tmp_path: Path) -> None:
    (tmp_path / "pin").write_text("1234\n")
    (tmp_path / "card").write_text(LONG_SECRET + "\n")
    files = FileSecrets(tmp_path)
    with pytest.raises(MissingSecretError, match="secret file 'pin' is 4 characters long, shorter than 8") as refused:
        files.resolve("pin")
    assert "1234" not in str(refused.value)
    assert files.resolve("card") == LONG_SECRET


# --- the start paths, through the CLI -----------------------------------------------------------

def _invoke(args: list[str], **env: str) -> Any:
    return CliRunner().invoke(cli, args, env=env)


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ")
    return str(lines[0])


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Stands in for the worker and the server: a start that gets past its checks is recorded."""
    import adapters.http.serve
    import adapters.logs
    import adapters.runtime

    calls: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(adapters.runtime, "run_worker", lambda config, **kw: calls.append(("worker", {})))
    monkeypatch.setattr(adapters.runtime, "tune_gc_for_worker", lambda: None)  # no gc.freeze in pytest
    monkeypatch.setattr(adapters.http.serve, "run_serve", lambda config, listener, **kw: calls.append(
        ("serve", {"host": listener.host, "port": listener.port, **kw})))
    monkeypatch.setattr(adapters.logs, "configure_logging", lambda fmt: None)
    return calls


def test_serve_on_every_interface_exits_2_with_one_line(started: list[Any]) -> None:
    line = _one_error_line(_invoke(["serve", "--host", "0.0.0.0"]))
    assert line.startswith("error: refusing to bind '0.0.0.0': it is not a loopback address")
    assert "--public" in line and started == []


def test_serve_on_a_host_from_the_environment_is_refused_too(started: list[Any]) -> None:
    line = _one_error_line(_invoke(["serve"], OPLEDGER_HTTP_HOST="10.0.0.5"))
    assert "refusing to bind '10.0.0.5'" in line and started == []


@pytest.mark.parametrize(("args", "env"), [(["--public"], {}), ([], {"OPLEDGER_HTTP_PUBLIC": "true"})],
                         ids=["flag", "environment"])
def test_serve_with_public_binds_and_warns_that_metrics_are_open(args: list[str], env: dict[str, str],
                                                                 started: list[Any]) -> None:
    with capture_logs() as logs:
        result = _invoke(["serve", "--host", "0.0.0.0", "--port", "0", *args], **env)
    assert result.exit_code == 0, result.output
    assert started == [("serve", {"host": "0.0.0.0", "port": 0, "write": False})]
    assert [(e["event"], e["log_level"], e["host"]) for e in logs] == [(OPEN_METRICS_WARNING, "warning", "0.0.0.0")]


def test_serve_on_loopback_starts_without_a_warning(started: list[Any]) -> None:
    with capture_logs() as logs:
        result = _invoke(["serve", "--port", "0"], OPLEDGER_API_TOKENS=_tokens(LONG_TOKEN))
    assert result.exit_code == 0, result.output
    assert started == [("serve", {"host": "127.0.0.1", "port": 0, "write": False})] and logs == []


def test_serve_refuses_a_short_token_in_one_line(started: list[Any]) -> None:
    line = _one_error_line(_invoke(["serve"], OPLEDGER_API_TOKENS=_tokens("tiny-token")))
    assert "OPLEDGER_API_TOKENS: a token of 10 characters (principal 'p0') is shorter than 16" in line
    assert "tiny-token" not in line and started == []


@pytest.mark.parametrize("command", [["worker"], ["serve"]])
def test_a_short_secret_stops_worker_and_serve_before_the_store_is_opened(command: list[str], tmp_path: Path,
                                                                           started: list[Any]) -> None:
    store = tmp_path / "store.db"
    result = _invoke([*command, "--database-url", f"sqlite:///{store}"], OPLEDGER_SECRET_CARD="x")
    line = _one_error_line(result)
    assert line.startswith("error: OPLEDGER_SECRET_CARD is 1 character long, shorter than 8: ")
    assert started == [] and not store.exists()


@pytest.mark.parametrize("command", [["worker"], ["serve"]])
def test_a_secret_of_8_characters_lets_worker_and_serve_start(command: list[str], started: list[Any]) -> None:
    result = _invoke(command, OPLEDGER_SECRET_CARD=LONG_SECRET)
    assert result.exit_code == 0, result.output
    assert [name for name, _ in started] == command
