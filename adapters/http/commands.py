"""``POST /v1/commands/{name}``: the host application's commands, with ``Idempotency-Key`` receipts.

The wire rules (IETF draft-ietf-httpapi-idempotency-key-header-07; issue 15 item 3):

- ``Idempotency-Key`` is an RFC 8941 sf-string (``"..."``, printable ASCII, ``\\"`` and ``\\\\``
  escapes), 1 to :data:`MAX_KEY_LENGTH` characters inside the quotes; one header at most.
  Malformed, or missing where the command requires a key: 400.
- Same key, same request, terminal: the stored envelope byte for byte plus
  ``Idempotent-Replayed: true``. Same key, another request: 422. Same key while the first is in
  flight: 409 ``idempotency_receipt_pending`` with ``Retry-After``. An execution that threw or
  whose commit's fate is unknown: 503 ``command_incomplete`` with ``Retry-After``.
- Every error is problem+json (RFC 9457) with ``code`` and ``retryable`` members.

The receipt logic is ``ledger.receipt_runner``; this module only speaks HTTP.
Source: issue 15; docs/adr/0006-idempotency-receipts.md.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from adapters.http.auth import TokenGrant, principal_with
from adapters.http.problems import MEDIA_TYPE, PROBLEM_RESPONSES, reject_unknown_query
from adapters.runtime import Store
from executors.receipt_leases import DEFAULT_RENEW_INTERVAL_SECONDS, ReceiptLeaseConfig, ReceiptLeaseService
from executors.receipt_recovery import ReceiptRecoveryConfig, ReceiptRecoveryService
from executors.receipt_retention import (
    DEFAULT_RETENTION_SECONDS,
    DEFAULT_SWEEP_INTERVAL_SECONDS,
    ReceiptRetentionConfig,
    ReceiptRetentionService,
)
from ledger import tracing
from ledger.clock import SystemClock
from ledger.errors import CommandIncompleteError, ConfigurationError, ReceiptMismatchError, ReceiptPendingError
from ledger.inbound import CommandSpec, UnknownCommandError, problem_body
from ledger.receipt_runner import DEFAULT_RECEIPT_LEASE_SECONDS, ReceiptRunner
from ledger.receipts import Envelope

MAX_KEY_LENGTH = 255
"""The longest idempotency key accepted, characters (inside the quotes)."""
KEY_HEADER = "Idempotency-Key"
KEY_PATTERN = r'^"(?:[ !#-\[\]-~]|\\["\\]){1,255}"$'
"""The key form the OpenAPI document shows: exactly what ``parse_key`` accepts, an sf-string of
1-255 printable ASCII characters with ``\\"`` and ``\\\\`` escapes (the length is checked after
unescaping). A UUID is the portable choice."""
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""The largest command request body accepted by default, bytes (1 MiB);
``OPLEDGER_RECEIPT_MAX_BODY_BYTES`` changes it."""
REPLAYED_HEADER = "Idempotent-Replayed"
TRANSACTION_HEADER = "Opledger-Transaction-Id"


class ReceiptSettings(BaseSettings):
    """Receipt settings of ``opledger serve`` (environment ``OPLEDGER_RECEIPT_<FIELD>``).

    Attributes:
        lease_seconds: an owner's lease on a pending receipt, seconds.
        renew_interval_seconds: how often owned receipts are renewed (at most lease / 3), seconds.
        retention_seconds: how long a completed receipt replays, seconds (default 24 h).
        sweep_interval_seconds: how often the retention sweep runs, seconds; a receipt expires
            at the first sweep after its retention ran out.
        max_adoptions: how many times recovery adopts one receipt; after that it waits for the
            client's retry (a handler that throws every time is not run forever).
        max_body_bytes: the largest command request body, bytes (keyed or not); a larger one is
            refused with 413 before anything is stored.
    """

    model_config = SettingsConfigDict(env_prefix="OPLEDGER_RECEIPT_", extra="ignore")

    lease_seconds: float = Field(default=DEFAULT_RECEIPT_LEASE_SECONDS, gt=0, le=86400)
    renew_interval_seconds: float = Field(default=DEFAULT_RENEW_INTERVAL_SECONDS, gt=0, le=86400)
    retention_seconds: float = Field(default=DEFAULT_RETENTION_SECONDS, gt=0, le=366 * 86400)
    sweep_interval_seconds: float = Field(default=DEFAULT_SWEEP_INTERVAL_SECONDS, gt=0, le=86400)
    max_adoptions: int = Field(default=3, ge=1, le=1000)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024, le=64 * 1024 * 1024)


def load_receipt_settings() -> ReceiptSettings:
    """``ReceiptSettings`` from the environment.

    Raises:
        ConfigurationError: a setting is malformed (the message names it).
    """
    try:
        return ReceiptSettings()
    except ValidationError as exc:
        problems = [f"OPLEDGER_RECEIPT_{str(e['loc'][0]).upper()}={e.get('input')!r}: {e['msg']}" for e in exc.errors()]
        raise ConfigurationError("invalid settings: " + "; ".join(problems)) from None


router = APIRouter(prefix="/v1/commands", tags=["commands"], dependencies=[Depends(reject_unknown_query)])
_lazy = threading.Lock()


class KeyError400(Exception):
    """A malformed ``Idempotency-Key`` (the message says how)."""


def parse_key(values: list[str]) -> str | None:
    """The key inside an ``Idempotency-Key`` sf-string, or None when the header is absent.

    Raises:
        KeyError400: more than one header, not a quoted sf-string, empty, or too long.

    Source: RFC 8941 §3.3.3 (sf-string); IETF draft-07 §2 (one header, sf-string).
    """
    if not values:
        return None
    if len(values) > 1:
        raise KeyError400("send one Idempotency-Key header, not several")
    raw = values[0].strip(" \t\r\n")  # OWS (a line break cannot reach us over HTTP/1.1; a test client may add one)
    if not raw.startswith('"'):
        raise KeyError400('the Idempotency-Key must be a quoted string (RFC 8941 sf-string), e.g. "8e03978e-...", '
                          f"not {_shown(raw)}")
    key, end = _sf_string(raw)
    rest = raw[end:].lstrip(" \t")
    if rest.startswith(";"):
        raise KeyError400("the Idempotency-Key takes no parameters: send the quoted key alone, without ';...'")
    if rest.startswith(","):
        raise KeyError400("send one Idempotency-Key, not a list of keys")
    if rest:
        raise KeyError400(f"the Idempotency-Key has {_shown(rest)} after its closing quote; an unescaped \" "
                          'ends the key (escape it as \\")')
    if not key:
        raise KeyError400("the Idempotency-Key is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise KeyError400(f"the Idempotency-Key is longer than {MAX_KEY_LENGTH} characters")
    return key


def _sf_string(raw: str) -> tuple[str, int]:
    """The content of the sf-string that ``raw`` starts with (RFC 8941 §4.2.5) and the index just
    past its closing quote.

    Raises:
        KeyError400: no closing quote, a bad escape, or a character that is not printable ASCII.
    """
    out: list[str] = []
    i = 1
    while i < len(raw):
        c = raw[i]
        if c == '"':
            return "".join(out), i + 1
        if c == "\\":
            if i + 1 >= len(raw) or raw[i + 1] not in '"\\':
                raise KeyError400('in an sf-string a backslash escapes only " and \\')
            out.append(raw[i + 1])
            i += 2
            continue
        if not 0x20 <= ord(c) <= 0x7E:
            raise KeyError400(f"the Idempotency-Key holds {_shown(c)} at character {i}: an sf-string holds "
                              "printable ASCII only")
        out.append(c)
        i += 1
    raise KeyError400('the Idempotency-Key has no closing quote (an sf-string: "...", escaping " and \\ with a '
                      "backslash)")


def _shown(text: str) -> str:
    """``text`` as a message shows it: its repr, cut to 40 characters."""
    return repr(text[:40]) + ("..." if len(text) > 40 else "")


def json_media_problem(content_type: str | None) -> str | None:
    """Why a command request's ``Content-Type`` is refused (415), or None when it is JSON.

    Accepted: ``application/json`` or any ``application/*+json``, with no ``charset`` or
    ``charset=utf-8`` (RFC 8259 §8.1: JSON between systems is UTF-8; §11 defines no charset).
    A request without ``Content-Type`` is refused too (issue 34 item 7): its body is not
    declared JSON, and guessing would take a form post or plain text as a command.
    """
    if content_type is None:
        return "a command body is JSON: send Content-Type: application/json"
    media, _, params = content_type.partition(";")
    media = media.strip().lower()
    if not (media == "application/json" or (media.startswith("application/") and media.endswith("+json"))):
        return f"a command body is JSON: send Content-Type: application/json, not {_shown(content_type)}"
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return f"a command body is UTF-8 JSON (RFC 8259 \u00a78.1), not charset {value.strip()!r}"
    return None


def runner_of(request: Request) -> ReceiptRunner:
    """The app's receipt runner (``serve`` sets one; otherwise made over the store on first use)."""
    state = request.app.state
    runner: ReceiptRunner | None = getattr(state, "receipt_runner", None)
    if runner is None or runner.app is not state.store.app:  # none yet, or made for a store since replaced
        with _lazy:
            runner = getattr(state, "receipt_runner", None)
            if runner is None or runner.app is not state.store.app:
                runner = ReceiptRunner(app=state.store.app, clock=SystemClock(),
                                       owner_prefix=f"serve:{uuid.uuid4().hex[:8]}")
                state.receipt_runner = runner
    return runner


def problem(status: int, title: str, code: str, detail: str, *, retryable: bool = False,
            retry_after: int | None = None) -> Response:
    """A typed problem+json response (``code``, ``retryable``; ``Retry-After`` when given)."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return Response(problem_body(status=status, title=title, code=code, detail=detail, retryable=retryable),
                    status_code=status, media_type=MEDIA_TYPE, headers=headers)


def envelope_response(envelope: Envelope, *, replayed: bool) -> Response:
    """The envelope as sent: its status, its headers and its body bytes, exactly; plus the
    transaction id and, for a replay, ``Idempotent-Replayed: true``."""
    response = Response(envelope.body, status_code=envelope.status)
    for name, value in envelope.headers:
        response.headers[name] = value
    if envelope.transaction_id is not None:
        response.headers[TRANSACTION_HEADER] = str(envelope.transaction_id)
    if replayed:
        response.headers[REPLAYED_HEADER] = "true"
    return response


_KEY_DOC = ("An RFC 8941 sf-string, e.g. `\"4f0c...\"`: a fresh key per logical request, the same key for "
            "its retries. Required by commands declared `key_required`.")
_RESPONSES: dict[int | str, dict[str, Any]] = {
    **PROBLEM_RESPONSES,
    200: {"description": "The command's response (or its replay, with `Idempotent-Replayed: true`)",
          "headers": {REPLAYED_HEADER: {"schema": {"type": "string", "enum": ["true"]},
                                        "description": "present on a replay of a stored response"}}},
    201: {"description": "Created (the command's own status; replayed byte for byte)"},
    400: {**PROBLEM_RESPONSES[400], "description": "A malformed or missing Idempotency-Key, or a body that is "
                                                   "not UTF-8 JSON (`invalid_json`: empty, malformed, a repeated "
                                                   "member name, nested deeper than 64 levels)"},
    409: {**PROBLEM_RESPONSES[409], "description": "`idempotency_receipt_pending` (retryable): a request with "
                                                   "this key is in flight; retry after Retry-After (1 s). "
                                                   "`store_read_only` (not retryable): this server opened the "
                                                   "SQLite store read-only; use `serve --write` or PostgreSQL. "
                                                   "Or the command's own refusal (its `code`)"},
    413: {**PROBLEM_RESPONSES[400], "description": "`body_too_large`: the body is larger than "
                                                   "OPLEDGER_RECEIPT_MAX_BODY_BYTES (1 MiB by default)"},
    415: {**PROBLEM_RESPONSES[400], "description": "`unsupported_media_type`: a Content-Type other than JSON "
                                                   "(UTF-8)"},
    422: {**PROBLEM_RESPONSES[422], "description": "The key was used for another request, or the body is "
                                                   "invalid (`invalid_request`; `unstorable_text`: a NUL or a lone "
                                                   "surrogate), or the ledger or the command refused it "
                                                   "(`invalid_payload`, or the command's own code)"},
    503: {**PROBLEM_RESPONSES[503], "description": "`command_incomplete`: retry with the same key after "
                                                   "Retry-After"},
}
Sender = Annotated[TokenGrant, Depends(principal_with(None))]


@router.post("/{name}", responses=_RESPONSES, response_class=Response, summary="Run a command of the host "
             "application, once per Idempotency-Key",
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": {"type": "object", "description": "the command's request model"}}}},
                 # Read by hand (parse_key), so that a malformed key is the draft's 400, not a 422.
                 "parameters": [{"name": KEY_HEADER, "in": "header", "required": False, "description": _KEY_DOC,
                                 "schema": {"type": "string", "pattern": KEY_PATTERN,
                                            "maxLength": MAX_KEY_LENGTH + 2}}]})
async def run_command(
    request: Request, grant: Sender,
    name: Annotated[str, Path(description="the command's declared name", pattern=r"^[a-z0-9_.-]{1,64}$")],
) -> Response:
    try:
        key = parse_key(request.headers.getlist(KEY_HEADER))
    except KeyError400 as exc:
        return problem(400, "Bad request", "idempotency_key_malformed", str(exc))
    media_problem = json_media_problem(request.headers.get("content-type"))
    if media_problem is not None:
        return problem(415, "Unsupported media type", "unsupported_media_type", media_problem)
    runner = runner_of(request)
    try:
        spec = runner.spec(name)
    except UnknownCommandError as exc:
        return problem(404, "Not found", "unknown_command", str(exc))
    if spec.role is not None and spec.role not in grant.roles:
        return problem(403, "Forbidden", "forbidden", f"command {name!r} needs the {spec.role} role")
    if key is None and spec.key_required:
        return problem(400, "Bad request", "idempotency_key_missing",
                       f"command {name!r} requires an Idempotency-Key header (an sf-string)")
    body = await request.body()  # bounded by adapters.http.guard: 413 before anything is stored
    # The caller's trace, current while the handler runs (its intents join it; CommandContext
    # shows it); unless an OpenTelemetry SDK already made the server span from these headers.
    with tracing.attached(tracing.context_of(request.headers.get("traceparent"), request.headers.get("tracestate"))):
        return await _run(request, runner, spec, grant, key, body)


async def _run(request: Request, runner: ReceiptRunner, spec: CommandSpec, grant: TokenGrant, key: str | None,
               body: bytes) -> Response:
    """Run (or replay) the command and answer it."""
    try:
        if not request.app.state.writable:  # a completed request is still replayed (issue 34 item 7)
            stored = await run_in_threadpool(runner.stored_answer, spec, grant.principal, key, body) if key else None
            if stored is None:
                return problem(409, "Conflict", "store_read_only", "this server opened the SQLite store read-only "
                               "(a worker owns it): new commands need `opledger worker --serve`, "
                               "`opledger serve --write` or PostgreSQL; completed ones are replayed")
            return envelope_response(stored.envelope, replayed=True)
        if key is None:
            envelope = await run_in_threadpool(runner.run_unkeyed, spec, grant.principal, body)
            return envelope_response(envelope, replayed=False)
        answer = await run_in_threadpool(runner.submit, spec, grant.principal, key, body)
    except ReceiptMismatchError as exc:
        return problem(422, "Invalid input", "idempotency_key_reused", str(exc))
    except ReceiptPendingError as exc:
        return problem(409, "Conflict", "idempotency_receipt_pending", str(exc), retryable=True,
                       retry_after=exc.retry_after_seconds)
    except CommandIncompleteError as exc:
        return problem(503, "Service unavailable", "command_incomplete", str(exc), retryable=True,
                       retry_after=exc.retry_after_seconds)
    return envelope_response(answer.envelope, replayed=answer.replayed)


def start_receipt_services(store: Store, settings: ReceiptSettings, stop: threading.Event, *,
                           max_clock_skew_seconds: float) -> tuple[ReceiptRunner, list[threading.Thread]]:
    """The receipt runner of a writing ``serve`` process and its three services, each in its own
    thread until ``stop``: owner-lease renewal, recovery, retention (so that neither renewal nor
    recovery can starve the other).

    Leases are judged by the store's clock (the database's on PostgreSQL; DESIGN §7).

    Returns:
        ``(runner, threads)``; put the runner on ``app.state.receipt_runner``.
    """
    clock = store.view.lease_clock(SystemClock(), max_skew_seconds=max_clock_skew_seconds)
    runner = ReceiptRunner(app=store.app, clock=clock, lease_seconds=settings.lease_seconds,
                           owner_prefix=f"serve:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:4]}")
    services: list[tuple[str, Callable[[threading.Event], None]]] = [
        ("receipt-leases", ReceiptLeaseService(runner=runner, config=ReceiptLeaseConfig(
            lease_seconds=settings.lease_seconds, interval_seconds=settings.renew_interval_seconds)).run),
        ("receipt-recovery", ReceiptRecoveryService(runner=runner, config=ReceiptRecoveryConfig(
            interval_seconds=min(1.0, settings.lease_seconds / 3), max_adoptions=settings.max_adoptions)).run),
        ("receipt-retention", ReceiptRetentionService(runner=runner, config=ReceiptRetentionConfig(
            retention_seconds=settings.retention_seconds, interval_seconds=settings.sweep_interval_seconds)).run),
    ]
    threads = []
    if runner.commands:  # a host application without commands needs none of them
        for name, loop in services:
            thread = threading.Thread(target=loop, args=(stop,), name=name, daemon=True)
            thread.start()
            threads.append(thread)
    return runner, threads
