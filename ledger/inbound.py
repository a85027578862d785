"""Inbound commands: declaring them on a host application, and what a handler sees and returns.

A host application declares a command with :func:`command` on a method::

    class Shop(LedgerApplication):
        @command("place_order", request=PlaceOrder, role=None, key_required=True)
        def place_order(self, ctx: CommandContext, request: PlaceOrder) -> Reply:
            order = Order(...)
            op = self.intend(order, "payments.charge", payload={...})
            ctx.stage(order, op)  # saved by the ledger, with the receipt, in one transaction
            return Reply(201, body=OrderView(...), headers={"Location": f"/orders/{order.id}"})

The handler never calls ``save``: it stages its aggregates and the ledger saves them together
with the receipt's ``ReceiptCompleted`` (``ledger.receipt_runner``). A deterministic refusal is
raised as :class:`CommandRefused` and becomes a terminal ``not_applied`` envelope; any other
exception leaves the receipt pending and retryable.

Source: issue 15 items 1, 2, 4; docs/adr/0006-idempotency-receipts.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.domain import Aggregate
from pydantic import BaseModel

from ledger.declarations import canonical_json
from ledger.errors import InvalidArgumentError, LedgerError
from ledger.receipts import APPLIED, KEPT_HEADERS, NOT_APPLIED, PROBLEM_JSON, Envelope, problem_body

COMMAND_ROUTE = "POST /v1/commands/{name}"
"""The route every command is served on (part of the fingerprint)."""
JSON = "application/json"
_COMMAND_ATTRIBUTE = "__opledger_command__"


class CommandRefused(Exception):
    """Raise from a handler for a deterministic refusal: nothing is applied, and the receipt
    ends ``not_applied`` with this code, message and retryability (replayed for the same key).

    Args:
        code: a stable machine-readable code, e.g. ``insufficient_funds``.
        message: for people.
        status: the HTTP status (4xx), 422 by default.
        retryable: whether the same command may succeed later *with a new key*.
    """

    def __init__(self, code: str, message: str, *, status: int = 422, retryable: bool = False) -> None:
        if not 400 <= status <= 499:
            raise InvalidArgumentError(f"a refusal's status must be 4xx, not {status}")
        super().__init__(message)
        self.code, self.message, self.status, self.retryable = code, message, status, retryable


class UnknownCommandError(LedgerError, KeyError):
    """No command of this name is declared on the host application. Fix: the name is the first
    argument of ``@command`` (``GET /openapi.json`` lists the route; the guide lists the demo's)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass
class Reply:
    """What a handler returns.

    Attributes:
        status: HTTP status (2xx), e.g. 201.
        body: a pydantic model or plain JSON data (None: an empty body).
        headers: response headers to keep and replay (``Location``, ``ETag``, any other the
            handler marks by naming it here); ``Content-Type`` is ``application/json`` unless set.
    """

    status: int = 200
    body: BaseModel | Mapping[str, Any] | list[Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class CommandContext:
    """What a handler is given besides its request.

    Attributes:
        principal: who sent the command (the bearer token's principal).
        now: the injected instant (UTC) of this execution.
        transaction_id: the receipt id (None on the keyless path).
        staged: aggregates to save with the receipt (see :meth:`stage`).
        traceparent: the W3C trace context the handler runs in: the request's ``traceparent``
            (or, with an OpenTelemetry SDK, the HTTP server span made from it); None without
            one, and when recovery runs an adopted command. The handler runs with it current,
            so an intent made there is in that trace without passing it (``ledger.tracing``).
        tracestate: the W3C ``tracestate`` that goes with it, if any.
    """

    principal: str
    now: datetime
    transaction_id: UUID | None
    staged: list[Aggregate] = field(default_factory=list)
    traceparent: str | None = None
    tracestate: str | None = None

    def stage(self, *aggregates: Aggregate) -> None:
        """Save ``aggregates`` with the command's receipt, in one transaction, after the handler
        returns (the handler must not call ``save`` itself)."""
        self.staged.extend(aggregates)


Handler = Callable[[Any, CommandContext, Any], Reply]
F = TypeVar("F", bound=Callable[..., Reply])


@dataclass(frozen=True)
class CommandSpec:
    """A declared command.

    Attributes:
        name: the route's last segment, ``[a-z0-9_.-]``, 1-64 characters; the receipt's scope.
        request: the pydantic model of the request body.
        handler: the application method (called as ``handler(app, ctx, request)``).
        role: the role the principal needs (``None``: any authenticated principal).
        key_required: whether a request without ``Idempotency-Key`` is refused (400).
        summary: one line for the OpenAPI and the guide.
    """

    name: str
    request: type[BaseModel]
    handler: Handler
    role: str | None = None
    key_required: bool = False
    summary: str = ""


def command(name: str, *, request: type[BaseModel], role: str | None = None, key_required: bool = False,
            summary: str = "") -> Callable[[F], F]:
    """Declare a method of a ``LedgerApplication`` subclass as the handler of command ``name``.

    Raises:
        InvalidArgumentError: a malformed name, or ``request`` is not a pydantic model.
    """
    if not (0 < len(name) <= 64 and all(c.isascii() and (c.isalnum() or c in "_.-") for c in name)
            and name == name.lower()):
        raise InvalidArgumentError(f"a command name is 1-64 characters of a-z 0-9 _ . -, not {name!r}")
    if not (isinstance(request, type) and issubclass(request, BaseModel)):
        raise InvalidArgumentError(f"command {name!r}: request must be a pydantic model class")

    def mark(method: F) -> F:
        spec = CommandSpec(name=name, request=request, handler=method, role=role, key_required=key_required,
                           summary=summary or (method.__doc__ or "").strip().split("\n")[0])
        setattr(method, _COMMAND_ATTRIBUTE, spec)
        return method

    return mark


def commands_of(app_class: type) -> dict[str, CommandSpec]:
    """The commands declared on ``app_class`` (and its bases), by name.

    Raises:
        InvalidArgumentError: two methods declare the same name.
    """
    found: dict[str, CommandSpec] = {}
    for klass in reversed(app_class.__mro__):
        for attribute in vars(klass).values():
            spec = getattr(attribute, _COMMAND_ATTRIBUTE, None)
            if isinstance(spec, CommandSpec):
                other = found.get(spec.name)
                if other is not None and other.handler.__name__ != spec.handler.__name__:
                    raise InvalidArgumentError(f"command {spec.name!r} is declared twice on {app_class.__name__}")
                found[spec.name] = spec
    return found


MAX_BODY_DEPTH = 64
"""The deepest nesting of arrays and objects a command body may have (a deeper one is refused as
``invalid_json`` before anything recurses over it)."""
INVALID_JSON = "invalid_json"
UNSTORABLE_TEXT = "unstorable_text"
BODY_ERROR_STATUS = {INVALID_JSON: 400, UNSTORABLE_TEXT: 422}
"""The status of each body refusal code."""
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class BodyRefused(ValueError):
    """A command body refused before its model sees it: ``code`` is ``invalid_json`` or
    ``unstorable_text``; the message says what is wrong."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_body(body: bytes) -> Any:
    """A command body as plain JSON data.

    Refused (``invalid_json``): an empty body; bytes that are not UTF-8 (RFC 8259 §8.1: JSON
    exchanged between systems is UTF-8; a byte order mark is refused too); text that is not JSON;
    a repeated member name in one object (RFC 8259 §4 leaves its meaning open: it is refused,
    never "last wins"); NaN or infinities; nesting deeper than :data:`MAX_BODY_DEPTH`.
    Refused (``unstorable_text``): a NUL character or a lone surrogate in any key or text,
    which the store cannot hold (``ledger.codec``).

    Raises:
        BodyRefused: as above.
    """
    value = parse_json(body)
    _check_tree(value)
    return value


def parse_json(body: bytes) -> Any:
    """:func:`parse_body` without the check for text the store cannot hold: for a body whose
    text is stored escaped rather than refused (a provider's callback, ``ledger.facts``).

    Raises:
        BodyRefused: ``invalid_json``, as :func:`parse_body` says.
    """
    if not body.strip():
        raise BodyRefused(INVALID_JSON, "the body is empty; send a JSON object")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyRefused(INVALID_JSON, f"the body is not UTF-8 (RFC 8259 \u00a78.1): {exc}") from None
    if text.startswith("\ufeff"):
        raise BodyRefused(INVALID_JSON, "the body starts with a byte order mark; send UTF-8 JSON without one")
    try:
        value = json.loads(text, object_pairs_hook=_unique_members, parse_constant=_no_constant)
    except RecursionError:
        raise BodyRefused(INVALID_JSON, f"the body nests deeper than {MAX_BODY_DEPTH} levels") from None
    except BodyRefused:
        raise
    except ValueError as exc:
        raise BodyRefused(INVALID_JSON, f"the body is not valid JSON: {exc}") from None
    return value


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, value in pairs:
        if name in found:
            raise BodyRefused(INVALID_JSON, f"the body repeats the member name {name!r} in one object")
        found[name] = value
    return found


def _no_constant(name: str) -> Any:
    raise BodyRefused(INVALID_JSON, f"the body holds {name}, which is not JSON (numbers must be finite)")


def _check_tree(value: Any) -> None:
    """Walk ``value`` without recursion: its depth, and text the store cannot hold."""
    pending: list[tuple[Any, str, int]] = [(value, "body", 1)]
    while pending:
        item, path, depth = pending.pop()
        if isinstance(item, str):
            _check_text(item, path)
        elif isinstance(item, (dict, list)):
            if depth > MAX_BODY_DEPTH:
                raise BodyRefused(INVALID_JSON, f"the body nests deeper than {MAX_BODY_DEPTH} levels")
            if isinstance(item, dict):
                for key, member in item.items():
                    _check_text(key, f"a member name in {path}")
                    pending.append((member, f"{path}.{key}", depth + 1))
            else:
                pending.extend((member, f"{path}[{i}]", depth + 1) for i, member in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            raise BodyRefused(INVALID_JSON, f"{path} is not a finite number")


def _check_text(text: str, path: str) -> None:
    bad = _UNSTORABLE.search(text)
    if bad is not None:
        what = "a NUL character" if bad.group() == "\x00" else f"a lone surrogate (U+{ord(bad.group()):04X})"
        raise BodyRefused(UNSTORABLE_TEXT, f"{path} holds {what} at character {bad.start()}, which the store "
                                           "cannot hold; remove it")


def canonical_request(name: str, principal: str, body: bytes) -> dict[str, Any]:
    """The request a receipt stores and fingerprints: route, command, principal, canonical body.

    A body :func:`parse_body` refuses is kept as its digest and the error, so that the same bytes
    give the same fingerprint and a terminal refusal, and nothing unstorable or unbounded is
    stored. ``body_error_code`` is present only for a refusal other than ``invalid_json`` (so the
    fingerprints of requests recorded before it existed are unchanged).

    Returns:
        Plain JSON data: ``{"route", "command", "principal", "body", "body_error"}`` (plus
        ``"body_error_code"``, see above).
    """
    extra: dict[str, Any] = {}
    try:
        value = parse_body(body)
        canonical_json(value)  # what JSON cannot carry
        error = None
    except BodyRefused as exc:
        value = {"sha256": hashlib.sha256(body).hexdigest()}
        error = str(exc)
        if exc.code != INVALID_JSON:
            extra["body_error_code"] = exc.code
    except ValueError as exc:
        value = {"sha256": hashlib.sha256(body).hexdigest()}
        error = f"the body is not valid JSON: {exc}"
    return {"route": COMMAND_ROUTE, "command": name, "principal": principal, "body": value, "body_error": error,
            **extra}


def refusal_envelope(status: int, code: str, message: str, *, retryable: bool = False,
                     transaction_id: UUID | None = None, errors: list[dict[str, Any]] | None = None) -> Envelope:
    """The terminal ``not_applied`` envelope of a deterministic refusal (problem+json)."""
    body = problem_body(status=status, title=_TITLES.get(status, "Command refused"), code=code, detail=message,
                        retryable=retryable, transaction_id=transaction_id, errors=errors)
    return Envelope(status=status, headers=(("content-type", PROBLEM_JSON),), body=body, outcome=NOT_APPLIED,
                    error_code=code, error_message=message, retryable=retryable, transaction_id=transaction_id)


_TITLES = {400: "Bad request", 404: "Not found", 409: "Conflict", 422: "Invalid input"}


def reply_envelope(reply: Reply, transaction_id: UUID | None) -> Envelope:
    """The envelope of a handler's reply: its status, its headers (names lower case,
    ``content-type`` first) and its body as bytes.

    Raises:
        InvalidArgumentError: a status outside 200-299, or a header value with a line break.
    """
    if not 200 <= reply.status <= 299:
        raise InvalidArgumentError(f"a reply's status must be 2xx (refuse with CommandRefused), not {reply.status}")
    body = reply.body
    if body is None:
        data = b""
    elif isinstance(body, BaseModel):
        data = body.model_dump_json().encode()
    else:
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    headers: dict[str, str] = {}
    for name, value in reply.headers.items():
        if "\r" in value or "\n" in value:
            raise InvalidArgumentError(f"header {name!r} holds a line break")
        headers[name.lower()] = value
    content_type = headers.pop("content-type", JSON if data else "")
    ordered = ([("content-type", content_type)] if content_type else []) + [
        (name, headers[name]) for name in KEPT_HEADERS[1:] if name in headers] + [
        (name, value) for name, value in headers.items() if name not in KEPT_HEADERS]
    return Envelope(status=reply.status, headers=tuple(ordered), body=data, outcome=APPLIED,
                    transaction_id=transaction_id)
