"""The webhook adapter's pure decisions, row by row: classification, Retry-After, excerpts.

Source: DESIGN §5 (HTTP outcome classification), §9 (secret values never appear).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.webhook import (
    DEFAULT_MAX_RETRY_AFTER_SECONDS,
    REDACTED,
    HttpExchange,
    TransportFailure,
    WebhookConfig,
    classify,
    classify_lookup,
    excerpt,
    failure_of,
    parse_retry_after,
    redact,
    secrets_of,
    visible_text,
)
from adapters.webhook.excerpt import TRUNCATED_MARK
from ledger.errors import ConfigurationError, NaiveDatetimeError
from ledger.outcomes import Accepted, Ambiguous, Failed, FailureCategory, Succeeded

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
C = FailureCategory


def http_date(delta_seconds: float) -> str:
    return format_datetime(NOW + timedelta(seconds=delta_seconds), usegmt=True)


def response(status: int, *, headers: dict[str, str] | None = None, body: bytes = b"") -> HttpExchange:
    return HttpExchange(status_code=status, headers=headers or {}, body=body, excerpt="text")


def no_response(failure: TransportFailure, *, sent: bool) -> HttpExchange:
    return HttpExchange(failure=failure, sent=sent, excerpt="error")


# (case, exchange, expected outcome) for every DESIGN §5 row.
ROWS = [
    # failure before the request was sent: Failed, retryable, no egress
    ("connect refused/DNS/TLS", no_response(TransportFailure.CONNECT, sent=False),
     Failed(C.CONNECT, retryable=True, egress=False, detail="error")),
    ("unbuildable request", no_response(TransportFailure.INVALID_REQUEST, sent=False),
     Failed(C.INVALID_REQUEST, retryable=False, egress=False, detail="error")),
    ("timeout before anything left", no_response(TransportFailure.TIMEOUT, sent=False),
     Failed(C.CONNECT, retryable=True, egress=False, detail="error")),
    ("connect failure on a redirect hop", no_response(TransportFailure.CONNECT, sent=True),
     Failed(C.CONNECT, retryable=True, egress=True, detail="error")),
    # read timeouts and resets after sending: Ambiguous
    ("read timeout after sending", no_response(TransportFailure.TIMEOUT, sent=True),
     Ambiguous(reason="timeout", category=C.TIMEOUT, detail="error")),
    ("reset after sending", no_response(TransportFailure.RESET, sent=True),
     Ambiguous(reason="reset", category=C.TIMEOUT, detail="error")),
    # 429/503: not processed, retry after the hint
    ("429 without Retry-After", response(429),
     Failed(C.THROTTLED, retryable=True, retry_after=None, status_code=429, detail="text")),
    ("503 without Retry-After", response(503),
     Failed(C.THROTTLED, retryable=True, retry_after=None, status_code=503, detail="text")),
    ("503 Retry-After seconds", response(503, headers={"retry-after": "2"}),
     Failed(C.THROTTLED, retryable=True, retry_after=2.0, status_code=503, detail="text")),
    ("429 Retry-After HTTP-date", response(429, headers={"retry-after": http_date(30)}),
     Failed(C.THROTTLED, retryable=True, retry_after=30.0, status_code=429, detail="text")),
    ("429 Retry-After garbage", response(429, headers={"retry-after": "soon"}),
     Failed(C.THROTTLED, retryable=True, retry_after=None, status_code=429, detail="text")),
    ("503 Retry-After clamped", response(503, headers={"retry-after": "999999"}),
     Failed(C.THROTTLED, retryable=True, retry_after=DEFAULT_MAX_RETRY_AFTER_SECONDS, status_code=503,
            detail="text")),
    # other 4xx: Failed, not retryable
    *[(f"{s} rejected", response(s), Failed(C.REJECTED, retryable=False, status_code=s, detail="text"))
      for s in (400, 401, 403, 404, 409, 410, 422)],
    # 5xx other than 503: Ambiguous
    *[(f"{s} server error", response(s),
       Ambiguous(reason="server_error", category=C.SERVER_ERROR, status_code=s, detail="text"))
      for s in (500, 502, 504, 599)],
    ("status outside HTTP's range", response(600),
     Ambiguous(reason="unexpected_status", category=C.SERVER_ERROR, status_code=600, detail="text")),
    # 2xx: Succeeded, or Accepted when a 202 names a remote operation
    *[(f"{s} succeeded", response(s), Succeeded(status_code=s, excerpt="text")) for s in (200, 201, 204)],
    ("202 without a remote id", response(202), Succeeded(status_code=202, excerpt="text")),
    ("202 body remote_id", response(202, body=b'{"remote_id": "rop_1", "id": "x"}'),
     Accepted(remote_id="rop_1", status_code=202, excerpt="text")),
    ("202 body id", response(202, body=b'{"id": 42}'), Accepted(remote_id="42", status_code=202, excerpt="text")),
    ("202 Location", response(202, headers={"location": "/ops/7"}),
     Accepted(remote_id="/ops/7", status_code=202, excerpt="text")),
    ("202 remote id too long", response(202, body=json.dumps({"id": "x" * 300}).encode()),
     Succeeded(status_code=202, excerpt="text")),
    ("202 remote id not text", response(202, body=b'{"id": {"nested": 1}}'), Succeeded(status_code=202, excerpt="text")),
    ("202 truncated JSON", response(202, body=b'{"remote_id": "rop'), Succeeded(status_code=202, excerpt="text")),
    ("200 names its effect", response(200, body=b'{"id": "ch_1"}'),
     Succeeded(status_code=200, excerpt="text", remote_id="ch_1")),
]


@pytest.mark.parametrize(("exchange", "expected"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_classify_rows(exchange: HttpExchange, expected: object) -> None:
    assert classify(exchange, now=NOW) == expected


@pytest.mark.parametrize("status", [300, 301, 302, 303, 307, 308])
def test_unfollowed_redirect_is_rejected_and_says_so(status: int) -> None:
    outcome = classify(response(status, headers={"location": "https://elsewhere/x"}), now=NOW)
    assert isinstance(outcome, Failed)
    assert (outcome.category, outcome.retryable, outcome.status_code) == (C.REJECTED, False, status)
    assert "redirect" in outcome.detail and "https://elsewhere/x" in outcome.detail


def test_classify_reads_retry_after_relative_to_the_given_now() -> None:
    later = NOW + timedelta(seconds=20)
    outcome = classify(response(503, headers={"retry-after": http_date(30)}), now=later)
    assert isinstance(outcome, Failed) and outcome.retry_after == 10.0


@pytest.mark.parametrize(("value", "expected"), [
    (None, None),
    ("0", 0.0),
    ("120", 120.0),
    (" 7 ", 7.0),
    ("3601", 3600.0),
    ("9" * 5000, 3600.0),
    (http_date(90), 90.0),
    (http_date(-90), 0.0),
    (http_date(10 * 86_400), 3600.0),
    ("Sun, 01 Mar 2026 12:01:00 -0000", 60.0),
    ("Sun, 01 Mar 2026 13:01:00 +0100", 60.0),
    ("", None),
    ("soon", None),
    ("-5", None),
    ("1.5", None),
    ("0x10", None),
    ("Sun, 99 Foo 2026 99:99:99 GMT", None),
])
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW, max_seconds=3600.0) == expected


def test_parse_retry_after_refuses_a_naive_now() -> None:
    with pytest.raises(NaiveDatetimeError):
        parse_retry_after("5", now=datetime(2026, 1, 1), max_seconds=10.0)


LOOKUP_ROWS = [
    ("404 never received", response(404), None),
    ("200 received", response(200), Succeeded(status_code=200, excerpt="text")),
    ("200 names a remote operation", response(200, body=b'{"remote_id": "rop_9"}'),
     Accepted(remote_id="rop_9", status_code=200, excerpt="text")),
    ("500", response(500), Ambiguous(reason="lookup_failed", category=C.SERVER_ERROR, status_code=500,
                                     detail="text")),
    ("401", response(401), Ambiguous(reason="lookup_failed", category=C.SERVER_ERROR, status_code=401,
                                     detail="text")),
    ("429", response(429), Ambiguous(reason="lookup_failed", category=C.SERVER_ERROR, status_code=429,
                                     detail="text")),
    ("transport failure", no_response(TransportFailure.TIMEOUT, sent=True),
     Ambiguous(reason="lookup_failed", category=C.TIMEOUT, detail="error")),
    ("connect failure", no_response(TransportFailure.CONNECT, sent=False),
     Ambiguous(reason="lookup_failed", category=C.TIMEOUT, detail="error")),
]


@pytest.mark.parametrize(("exchange", "expected"), [r[1:] for r in LOOKUP_ROWS], ids=[r[0] for r in LOOKUP_ROWS])
def test_classify_lookup_rows(exchange: HttpExchange, expected: object) -> None:
    assert classify_lookup(exchange) == expected


_KEY = aiohttp.client_reqrep.ConnectionKey("x.invalid", 80, False, True, None, None, None)


@pytest.mark.parametrize(("exc", "connected", "expected"), [
    (aiohttp.ClientConnectorError(_KEY, OSError(111, "refused")), False, TransportFailure.CONNECT),
    (aiohttp.ConnectionTimeoutError("slow"), False, TransportFailure.CONNECT),
    (TimeoutError(), False, TransportFailure.CONNECT),  # the deadline passed before a connection was held
    (aiohttp.InvalidURL("ftp://x"), False, TransportFailure.INVALID_REQUEST),
    (ValueError("bad header"), False, TransportFailure.INVALID_REQUEST),
    (TimeoutError(), True, TransportFailure.TIMEOUT),
    (aiohttp.ServerDisconnectedError(), True, TransportFailure.RESET),
    (aiohttp.ClientOSError(104, "reset"), True, TransportFailure.RESET),
    (ValueError("the answer did not parse"), True, TransportFailure.RESET),
    (aiohttp.ClientPayloadError("cut"), True, TransportFailure.RESET),
])
def test_failure_of_maps_transport_errors_by_what_may_have_left(exc: BaseException, connected: bool,
                                                                expected: TransportFailure) -> None:
    assert failure_of(exc, connected=connected) is expected


# --- excerpts and redaction -------------------------------------------------------------------

HOSTILE_BODIES = {
    "huge": b"x" * (5 * 1024 * 1024),
    "nul": b'{"a":\x00"b"}' + b"\x00" * 100,
    "invalid utf-8": b'{"a":"\xff\xfe\xc3\x28 \xed\xa0\x80 \xf0\x28\x8c\xbc"}',
    "controls": b"\x1b[31mred\x1b[0m\x07\x7f\xc2\x85",
}


@pytest.mark.parametrize("raw", HOSTILE_BODIES.values(), ids=HOSTILE_BODIES.keys())
@pytest.mark.parametrize("complete", [True, False])
def test_excerpt_of_hostile_bodies_is_bounded_visible_utf8(raw: bytes, complete: bool) -> None:
    text = excerpt(raw, limit_chars=200, complete=complete)
    assert len(text) <= 200
    assert text.encode("utf-8").decode("utf-8") == text
    assert "\x00" not in text and "\x1b" not in text and "\x85" not in text


def test_excerpt_escapes_nul_and_invalid_bytes_visibly() -> None:
    assert visible_text(b"a\x00b\xffc\td\n") == "a\\x00b\\xffc\td\n"
    assert excerpt(b"ok\x00") == "ok\\x00"


def test_excerpt_marks_truncation_within_the_limit() -> None:
    text = excerpt(b"y" * 5000, limit_chars=100)
    assert len(text) == 100 and text.endswith(TRUNCATED_MARK)
    assert excerpt(b"short", limit_chars=100, complete=False) == "short" + TRUNCATED_MARK


def test_redact_replaces_plain_and_json_escaped_forms_longest_first() -> None:
    secrets = ["tok_12345678", "tok_1234", 'p"ss\\wörd']
    text = 'a tok_12345678 b tok_1234 c {"x":"p\\"ss\\\\w\\u00f6rd"} d p\\"ss\\\\wörd'
    cleaned = redact(text, secrets)
    assert cleaned == f'a {REDACTED} b {REDACTED} c {{"x":"{REDACTED}"}} d {REDACTED}'


def test_redact_without_secrets_is_identity_and_ignores_empty_values() -> None:
    assert redact("anything", []) == "anything"
    assert redact("anything", [""]) == "anything"


def test_redaction_happens_before_truncation() -> None:
    secret = "sk_live_abcdefghijklmnop"
    text = excerpt(("." * 90 + secret).encode(), limit_chars=100, secrets=[secret])
    assert "sk_live" not in text and len(text) <= 100


def test_a_secret_cut_at_the_read_bound_leaves_no_prefix() -> None:
    secret = "sk_live_abcdefghijklmnop"
    raw = (b"." * 50 + secret.encode())[:60]  # the reader stopped inside the secret
    text = excerpt(raw, limit_chars=1000, secrets=[secret], complete=False)
    assert "sk_li" not in text and text == "." * 50 + TRUNCATED_MARK


# A secret made of the marks' own characters could reappear across a mark's edge; exclude them.
_SECRETS = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=REDACTED + TRUNCATED_MARK),
                   min_size=1, max_size=30)


@given(raw=st.binary(max_size=3000), secret=_SECRETS, complete=st.booleans())
def test_excerpt_is_always_bounded_valid_text_without_the_secret(raw: bytes, secret: str,
                                                                 complete: bool) -> None:
    text = excerpt(raw + secret.encode() + raw, limit_chars=500, secrets=[secret], complete=complete)
    assert len(text) <= 500
    assert text.encode("utf-8").decode("utf-8") == text
    assert secret not in text


def test_secrets_of_returns_the_non_empty_request_secrets() -> None:
    from uuid import uuid4

    from ledger.declarations import DeliveryMode
    from ledger.egress import EgressRequest

    request = EgressRequest(
        operation_id=uuid4(), attempt_id=uuid4(), attempt_number=1, integration="pay.charge",
        delivery_mode=DeliveryMode.IDEMPOTENT, target="http://x.invalid/",
        payload={"card": "4242424242424242", "pin": "1234", "amount": 5, "note": "hi"},
        secrets=("4242424242424242", "", "1234"),
    )
    assert secrets_of(request) == ("4242424242424242", "1234")


def test_secrets_of_is_empty_without_request_secrets() -> None:
    from uuid import uuid4

    from ledger.declarations import DeliveryMode
    from ledger.egress import EgressRequest

    request = EgressRequest(
        operation_id=uuid4(), attempt_id=uuid4(), attempt_number=1, integration="pay.charge",
        delivery_mode=DeliveryMode.IDEMPOTENT, target="http://x.invalid/",
        payload={"card": "4242424242424242"},
    )
    assert secrets_of(request) == ()


@pytest.mark.parametrize("overrides", [
    {"max_response_bytes": 0},
    {"excerpt_chars": 5},
    {"max_retry_after_seconds": -1.0},
    {"max_retry_after_seconds": float("inf")},
    {"lookup_path": "idempotency/{key}"},
    {"lookup_path": "/idempotency"},
])
def test_config_refuses_nonsense(overrides: dict) -> None:
    with pytest.raises(ConfigurationError):
        WebhookConfig(**overrides)
