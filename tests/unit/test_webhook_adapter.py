"""The webhook adapter's I/O against an in-process partner (a Werkzeug server on loopback whose
answers the tests write as ``httpx`` responses): headers, signing, bounds, redirects, failures.

Source: DESIGN §5, §7 (Idempotency-Key, attempt id, traceparent); Standard Webhooks specification.
"""

from __future__ import annotations

import base64
import json
import math
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from adapters.webhook import REDACTED, WebhookAdapter, WebhookConfig
from ledger.clock import FakeClock
from ledger.declarations import DeliveryMode, canonical_json
from ledger.egress import EgressRequest
from ledger.errors import ConfigurationError
from ledger.outcomes import Accepted, Ambiguous, Failed, FailureCategory, Succeeded
from tests.loopback import Partner, closed_port, raw_server, reset

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture(scope="module")
def partner() -> Iterator[Partner]:
    running = Partner()
    yield running
    running.server.shutdown()


PARTNER: list[Partner] = []


@pytest.fixture(autouse=True)
def _partner(partner: Partner) -> Iterator[None]:
    PARTNER.append(partner)
    yield
    PARTNER.clear()


def egress(target: str | None = "/hooks/pay?x=1",
           mode: DeliveryMode = DeliveryMode.NON_IDEMPOTENT, **overrides) -> EgressRequest:
    if target is not None and target.startswith("/"):
        target = PARTNER[0].base + target
    fields = dict(operation_id=uuid4(), attempt_id=uuid4(), attempt_number=1, integration="pay.charge",
                  delivery_mode=mode, target=target, payload={"amount": 5, "card": "4242424242424242"},
                  traceparent=TRACEPARENT, timeout_seconds=2.5,
                  secrets=("4242424242424242",))
    return EgressRequest(**{**fields, **overrides})


@pytest.fixture
def wall_clock() -> FakeClock:
    # standardwebhooks verifies timestamps against the real time, within five minutes.
    return FakeClock(datetime.now(UTC))


def adapter_for(handler: Handler, clock: FakeClock, **config) -> WebhookAdapter:
    PARTNER[0].handler = handler
    return WebhookAdapter(secret=SECRET, clock=clock, config=WebhookConfig(**config))


def test_send_signs_and_identifies_the_attempt(wall_clock: FakeClock) -> None:
    seen: list[httpx.Request] = []
    adapter = adapter_for(lambda r: seen.append(r) or httpx.Response(200), wall_clock)
    request = egress(headers={"X-Tenant": "acme", "Idempotency-Key": "forged"})

    assert adapter.send(request) == Succeeded(status_code=200)

    sent = seen[0]
    assert sent.method == "POST" and str(sent.url) == request.target
    assert sent.content == canonical_json(request.payload)
    op = str(request.operation_id)
    assert sent.headers["webhook-id"] == op
    assert sent.headers["Idempotency-Key"] == op
    assert sent.headers["X-Attempt-Id"] == str(request.attempt_id)
    assert sent.headers["traceparent"] == TRACEPARENT
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.headers["webhook-timestamp"] == str(math.floor(wall_clock.now().timestamp()))
    assert sent.headers["X-Tenant"] == "acme"
    Webhook(SECRET).verify(sent.content, dict(sent.headers))


def test_request_repr_never_shows_a_resolved_secret() -> None:
    request = egress()
    assert request.secrets == ("4242424242424242",)
    text = repr(request)
    assert "4242424242424242" not in text
    assert str(request.operation_id) in text and "pay.charge" in text


def test_webhook_id_is_stable_across_attempts(wall_clock: FakeClock) -> None:
    seen: list[httpx.Request] = []
    adapter = adapter_for(lambda r: seen.append(r) or httpx.Response(200), wall_clock)
    first = egress()
    adapter.send(first)
    wall_clock.advance(30)
    adapter.send(egress(operation_id=first.operation_id, attempt_number=2))
    assert seen[0].headers["webhook-id"] == seen[1].headers["webhook-id"] == str(first.operation_id)
    assert seen[0].headers["X-Attempt-Id"] != seen[1].headers["X-Attempt-Id"]
    assert int(seen[1].headers["webhook-timestamp"]) == int(seen[0].headers["webhook-timestamp"]) + 30


def test_response_is_read_only_up_to_the_bound(wall_clock: FakeClock) -> None:
    produced: list[int] = []

    def endless() -> Iterator[bytes]:
        for _ in range(10_000):
            produced.append(1)
            yield b"z" * 1024

    adapter = adapter_for(lambda r: httpx.Response(200, content=endless()), wall_clock,
                          max_response_bytes=4096, excerpt_chars=100)
    outcome = adapter.send(egress())
    assert isinstance(outcome, Succeeded) and len(outcome.excerpt) <= 100
    # The adapter stops reading at the bound and drops the connection: the partner's writes
    # stall in the socket buffers (a few hundred KB on loopback), far short of its 10 MB.
    assert len(produced) < 5_000


def test_secret_values_echoed_back_are_redacted(wall_clock: FakeClock) -> None:
    adapter = adapter_for(lambda r: httpx.Response(400, content=b"bad card 4242424242424242"), wall_clock)
    outcome = adapter.send(egress())
    assert isinstance(outcome, Failed) and outcome.detail == f"bad card {REDACTED}"


def test_a_refused_connection_fails_without_egress(wall_clock: FakeClock) -> None:
    outcome = adapter_for(lambda r: httpx.Response(200), wall_clock).send(egress(target=closed_port()))
    assert isinstance(outcome, Failed), outcome
    assert (outcome.category, outcome.retryable, outcome.egress) == (FailureCategory.CONNECT, True, False)
    assert outcome.detail.startswith("ClientConnectorError: ")


@pytest.mark.parametrize("answer", [lambda conn: None, reset, lambda conn: conn.sendall(b"HTTP/1.1 banana\r\n\r\n")],
                         ids=["closed", "reset", "garbled"])
def test_a_connection_lost_after_sending_is_ambiguous(wall_clock: FakeClock,
                                                      answer: Callable[[socket.socket], None]) -> None:
    outcome = adapter_for(lambda r: httpx.Response(200), wall_clock).send(egress(target=raw_server(answer)))
    assert isinstance(outcome, Ambiguous) and outcome.reason == "reset", outcome


@pytest.mark.parametrize("target", [None, "ftp://partner.test/x", "partner.test/x"])
def test_an_unsendable_target_fails_without_egress(wall_clock: FakeClock, target: str | None) -> None:
    outcome = adapter_for(lambda r: httpx.Response(200), wall_clock).send(egress(target=target))
    assert isinstance(outcome, Failed)
    assert (outcome.category, outcome.retryable, outcome.egress) == (FailureCategory.INVALID_REQUEST, False, False)


def test_a_payload_that_is_not_json_fails_without_egress(wall_clock: FakeClock) -> None:
    outcome = adapter_for(lambda r: httpx.Response(200), wall_clock).send(egress(payload={"x": math.nan}))
    assert isinstance(outcome, Failed) and outcome.category is FailureCategory.INVALID_REQUEST


def redirecting(status: int, hops: int) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        step = int(request.url.params.get("step", "0"))
        if step < hops:
            return httpx.Response(status, headers={"Location": f"/next?step={step + 1}"})
        return httpx.Response(200, json={"method": request.method, "body": request.content.decode()})
    return handle


@pytest.mark.parametrize("mode", [DeliveryMode.IDEMPOTENT, DeliveryMode.READ_ONLY])
@pytest.mark.parametrize("status", [307, 308])
def test_method_preserving_redirects_are_followed_in_safe_modes(wall_clock: FakeClock, mode: DeliveryMode,
                                                               status: int) -> None:
    outcome = adapter_for(redirecting(status, hops=5), wall_clock).send(egress(mode=mode))
    assert isinstance(outcome, Succeeded)
    assert json.loads(outcome.excerpt) == {"method": "POST", "body": '{"amount":5,"card":"[REDACTED]"}'}


@pytest.mark.parametrize("mode", [DeliveryMode.NON_IDEMPOTENT, DeliveryMode.RECOVERABLE_REMOTE_ID,
                                  DeliveryMode.CALLBACK])
def test_redirects_are_not_followed_in_unsafe_modes(wall_clock: FakeClock, mode: DeliveryMode) -> None:
    outcome = adapter_for(redirecting(307, hops=1), wall_clock).send(egress(mode=mode))
    assert isinstance(outcome, Failed) and outcome.status_code == 307 and "redirect" in outcome.detail
    assert "not followed (only method-preserving redirects" in outcome.detail


@pytest.mark.parametrize("status", [301, 302, 303])
def test_redirects_that_would_turn_the_post_into_a_get_are_never_followed(wall_clock: FakeClock,
                                                                         status: int) -> None:
    outcome = adapter_for(redirecting(status, hops=1), wall_clock).send(egress(mode=DeliveryMode.IDEMPOTENT))
    assert isinstance(outcome, Failed) and outcome.status_code == status


def test_at_most_five_redirects_are_followed(wall_clock: FakeClock) -> None:
    outcome = adapter_for(redirecting(307, hops=6), wall_clock).send(egress(mode=DeliveryMode.IDEMPOTENT))
    assert isinstance(outcome, Failed) and outcome.status_code == 307
    # It says what happened: five were followed, the sixth was not (issue 34 item 5).
    assert outcome.detail.startswith("5 redirects followed, the limit; the next, to '/next?step=6', was not")


def test_retry_after_date_is_measured_from_the_injected_clock(wall_clock: FakeClock) -> None:
    when = wall_clock.now().replace(microsecond=0) + timedelta(seconds=45)
    header = when.strftime("%a, %d %b %Y %H:%M:%S GMT")
    outcome = adapter_for(lambda r: httpx.Response(429, headers={"Retry-After": header}), wall_clock).send(egress())
    assert isinstance(outcome, Failed) and outcome.retry_after == pytest.approx(45, abs=1)


def test_lookup_asks_the_target_origin_for_the_operation(wall_clock: FakeClock) -> None:
    seen: list[httpx.Request] = []
    adapter = adapter_for(lambda r: seen.append(r) or httpx.Response(404), wall_clock)
    request = egress()
    assert adapter.lookup(request) is None
    assert seen[0].method == "GET"
    assert str(seen[0].url) == f"{PARTNER[0].base}/idempotency/{request.operation_id}"
    Webhook(SECRET).verify(b"", dict(seen[0].headers), json_parse=False)


@pytest.mark.parametrize(("response", "expected"), [
    (httpx.Response(200, json={"status": "applied"}), Succeeded),
    (httpx.Response(200, json={"remote_id": "rop_1"}), Accepted),
    (httpx.Response(503), Ambiguous),
])
def test_lookup_outcomes(wall_clock: FakeClock, response: httpx.Response, expected: type) -> None:
    assert isinstance(adapter_for(lambda r: response, wall_clock).lookup(egress()), expected)


def test_lookup_failure_is_ambiguous(wall_clock: FakeClock) -> None:
    outcome = adapter_for(lambda r: httpx.Response(200), wall_clock).lookup(egress(target=closed_port()))
    assert isinstance(outcome, Ambiguous) and outcome.reason == "lookup_failed"


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_!!not base64!!", "garbage",
                                    "whsec_" + base64.b64encode(b"too-short").decode(),
                                    base64.b64encode(b"opledger-process-tests-secret!!").decode()])
def test_a_bad_signing_secret_is_a_configuration_error(secret: str) -> None:
    with pytest.raises(ConfigurationError):
        WebhookAdapter(secret=secret, clock=FakeClock())


def test_a_callback_mode_request_says_where_to_call_back(wall_clock: FakeClock) -> None:
    seen: list[httpx.Request] = []
    adapter = adapter_for(lambda r: seen.append(r) or httpx.Response(202), wall_clock,
                          callback_base_url="https://ledger.example/")
    adapter.send(egress(mode=DeliveryMode.CALLBACK, headers={"X-Callback-Url": "https://evil.example/"}))
    adapter.send(egress(mode=DeliveryMode.IDEMPOTENT))
    assert seen[0].headers["x-callback-url"] == "https://ledger.example/callbacks/pay.charge"
    assert "x-callback-url" not in seen[1].headers  # only callback mode is told
    unconfigured = adapter_for(lambda r: seen.append(r) or httpx.Response(202), wall_clock)
    unconfigured.send(egress(mode=DeliveryMode.CALLBACK))
    assert "x-callback-url" not in seen[2].headers


def test_every_thread_shares_the_adapters_one_session(wall_clock: FakeClock) -> None:
    # One event loop and one HTTP session per adapter, whichever egress thread calls it: its
    # connection pool, parser and TLS context are made once (issue 30; a TLS context alone is
    # about 20 ms of CPU).
    adapter = adapter_for(lambda r: httpx.Response(200), wall_clock)
    sessions: list[object] = []
    outcomes: list[object] = []

    def call() -> None:
        outcomes.append(adapter.send(egress()))
        sessions.append(adapter._transport.session)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert outcomes == [Succeeded(status_code=200)] * 4
        assert len({id(session) for session in sessions}) == 1
    finally:
        adapter.close()


def test_hostile_response_headers_are_read_as_text(wall_clock: FakeClock) -> None:
    # Bytes that are not UTF-8 and an encoded lone surrogate in header values: read as Latin-1
    # text, never a crash nor a lone surrogate in what is stored.
    target = raw_server(lambda conn: conn.sendall(
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: \xff\xfe\r\nLocation: /x\xed\xa0\x80\r\n"
        b"Content-Length: 4\r\n\r\n\xff\xfe\x00z"))
    outcome = adapter_for(lambda r: httpx.Response(200), wall_clock).send(egress(target=target))
    assert isinstance(outcome, Failed) and outcome.status_code == 429 and outcome.retry_after is None, outcome
    outcome.detail.encode("utf-8")  # storable text


def test_credentials_headers_do_not_follow_a_redirect_to_another_origin(wall_clock: FakeClock) -> None:
    seen: list[httpx.Request] = []
    port = PARTNER[0].server.server_port

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.host == "127.0.0.1":  # the same server under another origin's name
            return httpx.Response(307, headers={"Location": f"http://localhost:{port}/final"})
        return httpx.Response(200)

    adapter = adapter_for(handle, wall_clock)
    outcome = adapter.send(egress(mode=DeliveryMode.IDEMPOTENT, headers={"Authorization": "Bearer t0ken"}))
    assert outcome == Succeeded(status_code=200)
    assert [r.url.host for r in seen] == ["127.0.0.1", "localhost"]
    assert seen[0].headers["authorization"] == "Bearer t0ken" and "authorization" not in seen[1].headers
    assert seen[1].headers["webhook-signature"] == seen[0].headers["webhook-signature"]
