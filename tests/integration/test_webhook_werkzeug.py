"""The webhook adapter against responses nobody here wrote: Werkzeug's, served by Werkzeug.

Our partner and our classifier share our assumptions. This server does not: every status page
is Werkzeug's own (``werkzeug.exceptions``: its bodies, headers and reason phrases), every
redirect is Werkzeug's ``redirect()`` (its ``Location`` and body), and the server is Werkzeug's
threaded HTTP/1.1 server; only the routing (httpbin's paths, so the checks read as they did)
and the echo of ``/post`` are written here. So the classification is checked against someone
else's idea of each status, delay and redirect.

It replaced httpbin (issue 34 item 8): httpbin pins ``greenlet<3`` on Python < 3.12 and
Playwright needs greenlet 3, so the test extras could not be installed by one pip command
without a resolver conflict.

Source: DESIGN §5 (HTTP outcome classification).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote
from uuid import uuid4

import pytest
from werkzeug.exceptions import HTTPException, MethodNotAllowed, abort
from werkzeug.routing import Map, Rule
from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.utils import redirect
from werkzeug.wrappers import Request, Response

from adapters.webhook import REDACTED, WebhookAdapter
from ledger.clock import SystemClock
from ledger.declarations import DeliveryMode
from ledger.egress import EgressRequest
from ledger.outcomes import Ambiguous, Failed, FailureCategory, Outcome, Succeeded

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
CARD = "4000056655665556"
SHORT_TIMEOUT_SECONDS = 0.3
MAX_DELAY_SECONDS = 10.0  # the server's own bound on /delay, as httpbin's

ROUTES = Map([
    Rule("/status/<int:code>", endpoint="status"),
    Rule("/delay/<float:seconds>", endpoint="delay"),
    Rule("/delay/<int:seconds>", endpoint="delay"),
    Rule("/redirect-to", endpoint="redirect_to"),
    Rule("/post", endpoint="post", methods=["POST"]),
    Rule("/get", endpoint="get", methods=["GET"]),
])


def _echo(request: Request) -> Response:
    body = request.get_data(as_text=True)
    echoed = {"headers": dict(request.headers), "json": json.loads(body) if body else None, "url": request.url}
    return Response(json.dumps(echoed), mimetype="application/json")


def _respond(request: Request) -> Response:
    endpoint, args = ROUTES.bind_to_environ(request.environ).match()
    if endpoint == "status":
        if args["code"] < 300:
            return Response(status=args["code"])
        abort(args["code"])  # Werkzeug's response for that status
    if endpoint == "delay":
        time.sleep(min(float(args["seconds"]), MAX_DELAY_SECONDS))
        return _echo(request)
    if endpoint == "redirect_to":
        return redirect(request.args["url"], code=int(request.args.get("status_code", 302)))
    if endpoint in ("post", "get"):
        return _echo(request)
    raise MethodNotAllowed()


def _app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    request = Request(environ)
    try:
        response = _respond(request)
    except HTTPException as exc:
        response = exc.get_response(environ)  # Werkzeug's page for the status
    return response(environ, start_response)


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: object, **kwargs: object) -> None:
        pass


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    server = make_server("127.0.0.1", 0, _app, threaded=True, request_handler=_QuietHandler)
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
def test_status_codes(adapter: WebhookAdapter, server_url: str, status: int, kind: type,
                      category: FailureCategory | None, retryable: bool | None) -> None:
    outcome = send(adapter, f"{server_url}/status/{status}")
    assert isinstance(outcome, kind) and outcome.status_code == status
    if category is not None:
        assert outcome.category is category
    if retryable is not None:
        assert outcome.retryable is retryable


def test_post_echo_succeeds_with_our_headers_and_without_our_secret(adapter: WebhookAdapter,
                                                                    server_url: str) -> None:
    outcome = send(adapter, f"{server_url}/post")
    assert isinstance(outcome, Succeeded) and outcome.status_code == 200
    echoed = json.loads(outcome.excerpt)
    assert echoed["json"] == {"amount": 500, "card": REDACTED}
    assert CARD not in outcome.excerpt
    headers = {k.lower(): v for k, v in echoed["headers"].items()}
    assert headers["idempotency-key"] == headers["webhook-id"]
    assert {"x-attempt-id", "traceparent", "webhook-signature", "webhook-timestamp"} <= set(headers)
    assert CARD not in json.dumps(headers)


def test_delay_past_the_timeout_is_ambiguous(adapter: WebhookAdapter, server_url: str) -> None:
    outcome = send(adapter, f"{server_url}/delay/1", timeout=SHORT_TIMEOUT_SECONDS)
    assert isinstance(outcome, Ambiguous) and outcome.reason == "timeout"


def redirect_to(server_url: str, target: str, status: int) -> str:
    return f"{server_url}/redirect-to?url={quote(target, safe='')}&status_code={status}"


def test_redirect_is_not_followed_for_non_idempotent(adapter: WebhookAdapter, server_url: str) -> None:
    outcome = send(adapter, redirect_to(server_url, "/post", 307), mode=DeliveryMode.NON_IDEMPOTENT)
    assert isinstance(outcome, Failed)
    assert (outcome.category, outcome.status_code, outcome.retryable) == (FailureCategory.REJECTED, 307, False)
    assert "/post" in outcome.detail


def test_redirect_is_followed_for_idempotent_with_the_body(adapter: WebhookAdapter, server_url: str) -> None:
    outcome = send(adapter, redirect_to(server_url, "/post", 307), mode=DeliveryMode.IDEMPOTENT)
    assert isinstance(outcome, Succeeded) and outcome.status_code == 200
    assert json.loads(outcome.excerpt)["json"] == {"amount": 500, "card": REDACTED}


def test_a_302_is_not_followed_even_for_idempotent(adapter: WebhookAdapter, server_url: str) -> None:
    # Following would turn the POST into a GET of /get and report its 200 as our delivery.
    outcome = send(adapter, redirect_to(server_url, "/get", 302), mode=DeliveryMode.IDEMPOTENT)
    assert isinstance(outcome, Failed) and outcome.status_code == 302
