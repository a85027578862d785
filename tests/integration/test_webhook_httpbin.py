"""The webhook adapter against a server nobody here wrote: httpbin, served locally.

Our partner and our classifier share our assumptions; httpbin does not, so it checks that the
classification holds for someone else's idea of each status, delay and redirect.

Source: DESIGN §5 (HTTP outcome classification).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from urllib.parse import quote
from uuid import uuid4

import pytest
from werkzeug.serving import WSGIRequestHandler, make_server

from adapters.webhook import REDACTED, WebhookAdapter
from ledger.clock import SystemClock
from ledger.declarations import DeliveryMode
from ledger.egress import EgressRequest
from ledger.outcomes import Ambiguous, Failed, FailureCategory, Outcome, Succeeded

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
CARD = "4000056655665556"
SHORT_TIMEOUT_SECONDS = 0.3


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: object, **kwargs: object) -> None:
        pass


@pytest.fixture(scope="module")
def httpbin_url() -> Iterator[str]:
    logging.getLogger("httpbin").setLevel(logging.ERROR)  # "flasgger is not installed" is expected
    from httpbin import app

    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


@pytest.fixture(scope="module")
def adapter() -> Iterator[WebhookAdapter]:
    with WebhookAdapter(secret=SECRET, clock=SystemClock()) as webhook:
        yield webhook


def send(adapter: WebhookAdapter, url: str, *, mode: DeliveryMode = DeliveryMode.NON_IDEMPOTENT,
         timeout: float = 5.0) -> Outcome:
    return adapter.send(EgressRequest(
        operation_id=uuid4(), attempt_id=uuid4(), attempt_number=1, integration="pay.charge", delivery_mode=mode,
        target=url, payload={"amount": 500, "card": CARD}, timeout_seconds=timeout,
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        secrets=(CARD,),
    ))


STATUS_ROWS = [
    (200, Succeeded, None, None),
    (201, Succeeded, None, None),
    (404, Failed, FailureCategory.REJECTED, False),
    (429, Failed, FailureCategory.THROTTLED, True),
    (500, Ambiguous, FailureCategory.SERVER_ERROR, None),
    (503, Failed, FailureCategory.THROTTLED, True),
]


@pytest.mark.parametrize(("status", "kind", "category", "retryable"), STATUS_ROWS, ids=[str(r[0]) for r in STATUS_ROWS])
def test_status_codes(adapter: WebhookAdapter, httpbin_url: str, status: int, kind: type,
                      category: FailureCategory | None, retryable: bool | None) -> None:
    outcome = send(adapter, f"{httpbin_url}/status/{status}")
    assert isinstance(outcome, kind) and outcome.status_code == status
    if category is not None:
        assert outcome.category is category
    if retryable is not None:
        assert outcome.retryable is retryable


def test_post_echo_succeeds_with_our_headers_and_without_our_secret(adapter: WebhookAdapter,
                                                                    httpbin_url: str) -> None:
    outcome = send(adapter, f"{httpbin_url}/post")
    assert isinstance(outcome, Succeeded) and outcome.status_code == 200
    echoed = json.loads(outcome.excerpt)
    assert echoed["json"] == {"amount": 500, "card": REDACTED}
    assert CARD not in outcome.excerpt
    headers = {k.lower(): v for k, v in echoed["headers"].items()}
    assert headers["idempotency-key"] == headers["webhook-id"]
    assert {"x-attempt-id", "traceparent", "webhook-signature", "webhook-timestamp"} <= set(headers)
    assert CARD not in json.dumps(headers)


def test_delay_past_the_timeout_is_ambiguous(adapter: WebhookAdapter, httpbin_url: str) -> None:
    outcome = send(adapter, f"{httpbin_url}/delay/1", timeout=SHORT_TIMEOUT_SECONDS)
    assert isinstance(outcome, Ambiguous) and outcome.reason == "timeout"


def redirect_to(httpbin_url: str, target: str, status: int) -> str:
    return f"{httpbin_url}/redirect-to?url={quote(target, safe='')}&status_code={status}"


def test_redirect_is_not_followed_for_non_idempotent(adapter: WebhookAdapter, httpbin_url: str) -> None:
    outcome = send(adapter, redirect_to(httpbin_url, "/post", 307), mode=DeliveryMode.NON_IDEMPOTENT)
    assert isinstance(outcome, Failed)
    assert (outcome.category, outcome.status_code, outcome.retryable) == (FailureCategory.REJECTED, 307, False)
    assert "/post" in outcome.detail


def test_redirect_is_followed_for_idempotent_with_the_body(adapter: WebhookAdapter, httpbin_url: str) -> None:
    outcome = send(adapter, redirect_to(httpbin_url, "/post", 307), mode=DeliveryMode.IDEMPOTENT)
    assert isinstance(outcome, Succeeded) and outcome.status_code == 200
    assert json.loads(outcome.excerpt)["json"] == {"amount": 500, "card": REDACTED}


def test_a_302_is_not_followed_even_for_idempotent(adapter: WebhookAdapter, httpbin_url: str) -> None:
    # Following would turn the POST into a GET of /get and report its 200 as our delivery.
    outcome = send(adapter, redirect_to(httpbin_url, "/get", 302), mode=DeliveryMode.IDEMPOTENT)
    assert isinstance(outcome, Failed) and outcome.status_code == 302
