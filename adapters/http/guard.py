"""Every request is bounded before anything parses it: one ASGI middleware (issue 27 item 1).

For each request, in order, before the route runs:

0. a request line and headers larger than ``OPLEDGER_HTTP_MAX_HEADER_BYTES`` are answered 431
   (h11 bounds only a head still arriving; one that arrives whole in one read is measured here);
1. its route class (:func:`route_class`) says how large its body may be and how the caller
   proves who it is;
2. a request to a route behind bearer tokens (every ``/v1`` route) without a configured token
   is answered 401, and a callback without the Standard Webhooks headers 401, with nothing
   read: an anonymous client makes the server buffer no body and learns no schema (a path or
   method no route takes is left to the router's 404 or 405);
3. a declared ``Content-Length`` over the limit is answered 413 unread;
4. the body is read here, while it streams, with a deadline: past the limit (chunked, or more
   bytes than ``Content-Length`` claimed) 413 after at most the limit plus one read chunk;
   past the deadline (a client trickling its body) 408. An operator action's body, when there
   is one, must be strict JSON (``ledger.inbound.parse_json``: UTF-8, no repeated member, no
   ``NaN``, bounded nesting and numbers), else 422 ``invalid_json``, as commands and callbacks
   read theirs. The route then gets the body whole.

Each early answer is problem+json with ``Connection: close``, so the server stops reading the
rest. What the route decides afterwards (403 for a role, 422 for a malformed body, the
signature itself) stays the route's.

Source: issue 27 item 1; RFC 9110 §15.5.9 (408), §15.5.14 (413); RFC 6750 (bearer tokens).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adapters.http.auth import TokenGrant, bearer_grant, unauthorized
from adapters.http.callback_auth import has_signature_headers, signature_headers_missing
from adapters.http.commands import DEFAULT_MAX_BODY_BYTES
from adapters.http.limits import DEFAULT_BODY_TIMEOUT_SECONDS, DEFAULT_MAX_HEADER_BYTES
from adapters.http.problems import Problem, problem_response
from ledger.inbound import BodyRefused, parse_json

ACTION_MAX_BODY_BYTES = 32 * 1024
"""An operator action's body (``/v1`` routes but commands), bytes: the largest valid one,
``ledger.intents.MAX_EVIDENCE_CHARS`` (4,000) characters each written as a six-byte JSON escape,
fits (a test holds the two together)."""
CALLBACK_MAX_BODY_BYTES = 64 * 1024
"""A provider's callback body, bytes."""
OPEN_MAX_BODY_BYTES = 4 * 1024
"""Any other route's body (health, ``/metrics``, the console, OpenAPI: none reads one), bytes."""


@dataclass(frozen=True, slots=True)
class RouteClass:
    """How a request is bounded before its route runs.

    Attributes:
        name: ``action``, ``command``, ``callback`` or ``open``.
        body: how a 413's detail names the body, e.g. ``a command body``.
        max_body_bytes: the largest body, bytes (a command's may be configured).
        bearer: a configured bearer token is required before the body is read.
        signed: the Standard Webhooks headers are required before the body is read.
        strict_json: a body, when sent, must be strict JSON (``ledger.inbound.parse_json``).
    """

    name: str
    body: str
    max_body_bytes: int
    bearer: bool = False
    signed: bool = False
    strict_json: bool = False


ACTION = RouteClass("action", "an operator action's body", ACTION_MAX_BODY_BYTES, bearer=True, strict_json=True)
COMMAND = RouteClass("command", "a command body", DEFAULT_MAX_BODY_BYTES, bearer=True)  # or as configured
CALLBACK = RouteClass("callback", "a callback body", CALLBACK_MAX_BODY_BYTES, signed=True)
OPEN = RouteClass("open", "a body on this route", OPEN_MAX_BODY_BYTES)


def route_class(path: str) -> RouteClass:
    """The route class of a request path (the path alone decides, so no route is unbounded).

    Args:
        path: the request's path, e.g. ``/v1/operations/<id>/resolve``.

    Returns:
        ``COMMAND`` under ``/v1/commands/``, ``ACTION`` under ``/v1`` otherwise (reads take the
        same token and refuse large bodies alike), ``CALLBACK`` under ``/callbacks/``, else ``OPEN``.
    """
    if path.startswith("/v1/commands/"):
        return COMMAND
    if path == "/v1" or path.startswith("/v1/"):
        return ACTION
    if path.startswith("/callbacks/"):
        return CALLBACK
    return OPEN


class RequestGuard:
    """The ASGI middleware of the module docstring; ``opledger serve``'s app installs it.

    It reads from the app's state, per request: ``tokens`` (bearer grants),
    ``command_max_body_bytes`` and ``body_timeout_seconds``.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope["app"].state
        route = route_class(scope["path"])
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        refusal = _head_too_large(scope, getattr(state, "max_header_bytes", DEFAULT_MAX_HEADER_BYTES))
        if refusal is None and _routed(scope):
            refusal = _refused_unread(route, headers, getattr(state, "tokens", {}))
        limit = getattr(state, "command_max_body_bytes", route.max_body_bytes) if route is COMMAND \
            else route.max_body_bytes
        declared = headers.get("content-length", "")
        if refusal is None and declared.isdigit() and int(declared) > limit:
            refusal = _too_large(route, limit)
        if refusal is None and (declared not in ("", "0") or "transfer-encoding" in headers):
            timeout = getattr(state, "body_timeout_seconds", DEFAULT_BODY_TIMEOUT_SECONDS)
            read = await _read_body(receive, limit, timeout, route)
            if read is None:
                return  # the client went away: nobody to answer
            if isinstance(read, Problem):
                refusal = read
            else:
                refusal = _not_strict_json(read) if route.strict_json else None
                receive = _replaying(read, receive)
        if refusal is not None:
            refusal.headers = {**(refusal.headers or {}), "Connection": "close"}
            await problem_response(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _head_too_large(scope: Scope, limit: int) -> Problem | None:
    size = len(scope["method"]) + len(scope.get("raw_path") or scope["path"]) + len(scope.get("query_string", b"")) + \
        sum(len(name) + len(value) + 4 for name, value in scope["headers"])
    if size <= limit:
        return None
    return Problem(431, "Request header fields too large", f"the request line and headers are at most {limit:,} "
                   "bytes (OPLEDGER_HTTP_MAX_HEADER_BYTES)", code="headers_too_large")


def _not_strict_json(body: bytes) -> Problem | None:
    if not body.strip():
        return None  # no body: the route decides whether it needs one
    try:
        parse_json(body)
    except BodyRefused as exc:
        return Problem(422, "Invalid input", str(exc), code=exc.code)
    return None


def _routed(scope: Scope) -> bool:
    # Only a request some route takes (path and method) is authenticated here; any other is
    # left to the router's 404 or 405, still bounded (nothing reads its body).
    return any(route.matches(scope)[0] is Match.FULL for route in scope["app"].router.routes)


def _refused_unread(route: RouteClass, headers: Mapping[str, str], tokens: Mapping[str, TokenGrant]) -> Problem | None:
    if route.bearer and bearer_grant(tokens, headers.get("authorization")) is None:
        return unauthorized()
    if route.signed and not has_signature_headers(headers):
        return signature_headers_missing()
    return None


async def _read_body(receive: Receive, limit: int, timeout: float, route: RouteClass) -> bytes | Problem | None:
    """The whole body, or the problem that ends reading it, or None when the client left."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    body = bytearray()
    while True:
        try:
            message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0))
        except TimeoutError:
            return Problem(408, "Request timeout", f"the body did not arrive within {timeout:g} s",
                           code="body_timeout")
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            return _too_large(route, limit)
        if not message.get("more_body", False):
            return bytes(body)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the route the body read here, then passes on (disconnects)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def _too_large(route: RouteClass, limit: int) -> Problem:
    return Problem(413, "Body too large", f"{route.body} is at most {limit:,} bytes", code="body_too_large")
