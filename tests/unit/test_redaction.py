"""Issue 14 item 3: one redaction rule (``ledger.redaction``) for every sink, the secret
providers, and resolution only in fields classified secret."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import structlog

from executors.calls import adapter_error_text, redact_outcome
from executors.secrets import EnvironmentSecrets, FileSecrets, MissingSecretError, resolve_payload
from ledger.declarations import Integration
from ledger.errors import ConfigurationError
from ledger.outcomes import Ambiguous, Succeeded
from ledger.redaction import KNOWN_SECRETS, REDACTED, mask_url, redact, url_has_credentials

SECRET = 'p/ss"wörd+1 ok'
HOOK = Integration.parse({"name": "hooks.send", "version": 1, "adapter": "webhook", "delivery_mode": "idempotent",
                          "payload": {"n": "public", "note": "internal", "key": "secret"}})


def _encodings(value: str) -> dict[str, str]:
    raw = value.encode()
    return {
        "raw": value,
        "json": json.dumps(value)[1:-1],
        "json-unicode": json.dumps(value, ensure_ascii=False)[1:-1],
        "json-solidus": json.dumps(value)[1:-1].replace("/", "\\/"),
        "json-upper-hex": json.dumps(value)[1:-1].replace("\\u00f6", "\\u00F6"),
        "url": quote(value, safe=""),
        "url-plus": quote_plus(value),
        "url-lower": quote(value, safe="").replace("%2F", "%2f").replace("%C3%B6", "%c3%b6"),
        "base64": base64.b64encode(raw).decode(),
        "base64-unpadded": base64.b64encode(raw).decode().rstrip("="),
        "base64url": base64.urlsafe_b64encode(raw).decode(),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
    }


@pytest.mark.parametrize("form", sorted(_encodings(SECRET)))
def test_every_encoded_form_is_redacted(form: str) -> None:
    encoded = _encodings(SECRET)[form]
    text = f"before {encoded} after"
    assert redact(text, [SECRET]) == f"before {REDACTED} after"


def test_longer_values_win_and_empty_values_are_ignored() -> None:
    assert redact("abcdef abc", ["abc", "abcdef", ""]) == f"{REDACTED} {REDACTED}"
    assert redact("nothing here", []) == "nothing here"


def test_urls_with_credentials_are_detected_and_masked() -> None:
    assert url_has_credentials("https://u:p@h/x") and url_has_credentials("https://tok@h/")
    assert not url_has_credentials("https://h/x?email=a@b.c")
    assert mask_url("postgresql://root:hunter2@db:5432/app") == "postgresql://root:***@db:5432/app"
    assert mask_url("postgresql://root@db/app") == "postgresql://root@db/app"
    assert mask_url("sqlite:///x.db") == "sqlite:///x.db"


def test_resolution_happens_only_in_secret_fields() -> None:
    provider = EnvironmentSecrets({"k": SECRET})
    payload = {"n": "secretref:k", "note": "an internal text", "key": "secretref:k"}
    resolved, hidden = resolve_payload(payload, provider, HOOK)
    assert resolved == {"n": "secretref:k", "note": "an internal text", "key": SECRET}
    assert set(hidden) == {SECRET, "an internal text"}
    assert SECRET in KNOWN_SECRETS.snapshot()


def test_file_secrets_read_files_under_their_directory_only(tmp_path: Path) -> None:
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "password").write_text("s3cret-password\n")
    (tmp_path.parent / "outside").write_text("nope")
    files = FileSecrets(tmp_path)
    assert files.resolve("db/password") == "s3cret-password"
    with pytest.raises(MissingSecretError, match="not configured"):
        files.resolve("../outside")
    with pytest.raises(MissingSecretError, match="not configured"):
        files.resolve("missing")
    with pytest.raises(ConfigurationError, match="not a directory"):
        FileSecrets(tmp_path / "nope")


def test_adapter_exception_text_is_redacted_then_bounded() -> None:
    exc = RuntimeError(f"could not call with token={quote(SECRET, safe='')} " + "x" * 10_000)
    text = adapter_error_text(exc, (SECRET,))
    assert text.startswith(f"RuntimeError: could not call with token={REDACTED} ")
    assert len(text) <= 4096 and quote(SECRET, safe="") not in text


def test_outcomes_from_any_adapter_are_redacted() -> None:
    b64 = base64.b64encode(SECRET.encode()).decode()
    assert redact_outcome(Succeeded(excerpt=f"echo {b64}"), (SECRET,)) == Succeeded(excerpt=f"echo {REDACTED}")
    assert redact_outcome(Ambiguous(reason="timeout", detail=SECRET), (SECRET,)).detail == REDACTED


def test_the_log_processor_redacts_known_secrets_everywhere(
        capsys: pytest.CaptureFixture[str], json_logs: Callable[[], None]) -> None:
    json_logs()
    KNOWN_SECRETS.add(SECRET)
    log = structlog.get_logger("test.redaction.fresh")
    try:
        raise ValueError(f"boom {json.dumps(SECRET)}")
    except ValueError:
        log.exception("failed", token=SECRET, nested={"k": [base64.b64encode(SECRET.encode()).decode()]})
    out = capsys.readouterr().err
    assert "failed" in out and REDACTED in out
    for form in _encodings(SECRET).values():
        assert form not in out and json.dumps(form)[1:-1] not in out
