"""``POST /callbacks/{integration}``: authenticated callbacks from providers (issue 12 item 3).

A provider that reports results by calling us (delivery mode ``callback``) posts a JSON body
naming the operation and the attempt it answers, signed with Standard Webhooks under the
integration's callback secret (``adapters.http.callback_auth``; docs/adr/0005-callback-authentication.md).
The route, in order, and what it answers (a body over 64 KiB: 413, unread):

1. an undeclared integration, or one no version of which is in ``callback`` mode: 404;
2. no callback secret configured for it on this server: 503 (a deployment problem; logged);
3. missing headers, a stale timestamp (beyond the tolerance, default 300 s) or no matching
   signature: 401;
4. an authenticated body that is not a callback: 422; a server that opened the SQLite store
   read-only: 503 with ``Retry-After`` (the provider retries until a writing ``serve`` runs);
5. an operation that does not exist or is not of this integration, or an attempt that is not
   its latest: 404; one ``opledger archive`` moved out of the store: 200, the callback kept apart
   and put on the attention queue (``adapters.archive_attention``; ``fact``
   ``late_after_archive``, ``status`` ``archived``), never appended to it; the same message again
   (same ``webhook-id`` and ``webhook-timestamp``): 401 (replayed);
6. the same ``webhook-id`` re-signed (the provider's retry): 200, nothing recorded;
7. otherwise ``Operation.receive_callback`` decides: ``CallbackReceived`` while the operation waits
   for its result (but nothing for a ``progress`` report identical to the last one for the same
   attempt: ``unchanged``), ``LateObservationRecorded`` after an outcome it contradicts, nothing
   after one it agrees with. 200 says which; an operation expecting no callback (pending or
   claimed, its attempt closed for a retry) is 409.

Nothing is written before step 7, and every refusal is problem+json. The decision in steps 5-6 is
``ledger.callbacks.classify_callback`` on the operation as stored, so it holds across restarts
and across several ``serve`` processes; a concurrent duplicate loses on the operation's version,
is decided again on what the winner recorded, and is answered as a duplicate (re-signed) or a
replay (the same bytes).

Source: issue 12 item 3; Standard Webhooks; RFC 9457.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import structlog
from eventsourcing.persistence import IntegrityError
from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from standardwebhooks.webhooks import Webhook
from starlette.concurrency import run_in_threadpool

from adapters.archive_attention import LATE_AFTER_ARCHIVE, keep_late_callback
from adapters.http.callback_auth import (
    SIGNATURE_HEADERS,
    CallbackSecretUnavailable,
    SignedMessage,
    authenticate,
    load_verifier,
)
from adapters.http.problems import PROBLEM_RESPONSES, RETRY_AFTER_SECONDS, Problem
from adapters.operator import get_or_archived
from adapters.refusals import save_refusable
from adapters.runtime import Store
from executors.secrets import SecretProvider
from ledger import tracing
from ledger.application import LedgerApplication
from ledger.callbacks import CallbackVerdict, classify_callback
from ledger.declarations import NAME_PATTERN
from ledger.errors import (
    IllegalTransitionError,
    OperationInArchiveError,
    OperationNotFoundError,
    UnknownIntegrationError,
    WriteRefusedError,
)
from ledger.inbound import BodyRefused, parse_json
from ledger.modes import rules_for
from ledger.refusals import WriteKind
from ledger.status import OUTCOME_STATES

log = structlog.get_logger("opledger.callbacks")

MAX_CONFLICT_RETRIES = 8
"""How often a callback is decided again after losing a version conflict on its operation."""


class CallbackBody(BaseModel):
    """What a provider posts (signed): the operation and attempt it answers, and the result."""

    model_config = ConfigDict(extra="ignore")

    operation_id: UUID = Field(description="the operation id (the Idempotency-Key the provider received)")
    attempt_id: UUID = Field(description="the attempt it answers (the X-Attempt-Id the provider received)")
    outcome: Literal["succeeded", "failed", "progress"]
    remote_status: str | None = Field(default=None, max_length=200, description="the provider's status word")
    detail: str = Field(default="", max_length=2000, description="the provider's text for operators")


class CallbackReceipt(BaseModel):
    """What the ledger made of an authenticated callback."""

    operation_id: str
    callback_id: str = Field(description="the message's webhook-id")
    result: Literal["recorded", "duplicate", "agrees_with_outcome", "unchanged"] = Field(
        description="recorded: a new fact; duplicate: this webhook-id was recorded before (nothing new); "
                    "agrees_with_outcome: it arrived after an outcome it agrees with (nothing recorded); "
                    "unchanged: a progress report identical to the last one for this attempt (nothing recorded)")
    fact: str | None = Field(description="CallbackReceived or LateObservationRecorded when recorded; "
                                         "late_after_archive when the operation was archived (kept apart, on "
                                         "the attention queue)")
    status: str = Field(description="the operation's status after it (archived: moved into an archive segment)")


_BODY_SCHEMA: dict[str, Any] = {
    "required": True,
    "content": {"application/json": {"schema": CallbackBody.model_json_schema()}},
    "description": "Signed with Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature headers) "
                   "under the integration's callback secret; the signature covers the raw body.",
}
# Read by hand (the signature covers the raw body), documented so that clients send them: a
# callback without them is 401 before its body is read (adapters.http.guard).
_SIGNATURE_PARAMETERS = [{"name": name, "in": "header", "required": True, "schema": {"type": "string", "minLength": 1},
                          "description": "Standard Webhooks: " + about}
                         for name, about in zip(SIGNATURE_HEADERS, ("the message id (the same on retries)",
                                                                    "Unix seconds when signed",
                                                                    "v1,<base64 HMAC-SHA256 of id.timestamp.body>"))]
_CALLBACK_RESPONSES: dict[int | str, dict[str, Any]] = {
    **{code: PROBLEM_RESPONSES[code] for code in (401, 404, 409, 422, 503)},
    413: {**PROBLEM_RESPONSES[422], "description": "Body too large"},
}

router = APIRouter(tags=["callbacks"])
Integration = Annotated[str, Path(pattern=NAME_PATTERN, max_length=200, description="the integration's name")]


@router.post("/callbacks/{integration}", response_model=CallbackReceipt, responses=_CALLBACK_RESPONSES,
             summary="Receive a provider's signed callback for an operation of this integration",
             openapi_extra={"requestBody": _BODY_SCHEMA, "parameters": _SIGNATURE_PARAMETERS})
async def receive_callback(request: Request, integration: Integration) -> CallbackReceipt:
    body = await request.body()  # bounded and read by adapters.http.guard (64 KiB)
    return await run_in_threadpool(_receive, request, integration, body)


def _receive(request: Request, integration: str, raw: bytes) -> CallbackReceipt:
    state = request.app.state
    store: Store = state.store
    signed, body = authenticated(store.app, integration=integration, headers=request.headers, raw=raw,
                                 now=state.clock.now(), secrets=state.callback_secrets,
                                 tolerance_seconds=state.callback_tolerance_seconds)
    if not state.writable:  # after authentication, so a stranger learns nothing of the store
        raise Problem(503, "Store read-only", "this server opened the SQLite store read-only (a worker owns it): "
                      "callbacks need `opledger serve --write` (no worker running meanwhile) or PostgreSQL",
                      headers={"Retry-After": str(RETRY_AFTER_SECONDS * 5)})
    return record(store.app, integration=integration, signed=signed, body=body, now=state.clock.now())


def authenticated(app: LedgerApplication, *, integration: str, headers: Mapping[str, str], raw: bytes,
                  now: datetime, secrets: SecretProvider,
                  tolerance_seconds: float) -> tuple[SignedMessage, CallbackBody]:
    """Steps 1-4 of the module docstring: the integration, its secret, the signature and the body.

    Args:
        app: the host application (its registry).
        integration: the path's integration name.
        headers: the request headers (any case).
        raw: the raw body.
        now: UTC-aware instant (the injected clock).
        secrets: where the callback secret comes from.
        tolerance_seconds: the timestamp tolerance, seconds.

    Returns:
        The signed message's id and time, and the parsed body.

    Raises:
        Problem: 404 (integration), 503 (no secret), 401 (headers, time, signature), 422 (body).
    """
    signed = authenticate(_verifier(app, integration, secrets), headers, raw, now=now,
                          tolerance_seconds=tolerance_seconds)
    return signed, _parsed(raw)


def record(app: LedgerApplication, *, integration: str, signed: SignedMessage, body: CallbackBody,
           now: datetime) -> CallbackReceipt:
    """Steps 5-7 of the module docstring on an authenticated callback: decide on the operation
    as stored and record what it says, deciding again after a version conflict. The
    deterministic simulator calls this and :func:`authenticated` too, so it checks this path.

    Returns:
        The :class:`CallbackReceipt`.

    Raises:
        Problem: 404 (operation or attempt), 401 (replayed), 409 (not waiting for a callback),
            503 (the operation kept changing); nothing was written then.
    """
    for _ in range(MAX_CONFLICT_RETRIES):
        receipt = _record_once(app, integration, body, signed, now)
        if receipt is not None:
            return receipt
    raise Problem(503, "Store busy", f"operation {body.operation_id} kept changing; retry the callback",
                  headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def _verifier(app: LedgerApplication, integration: str, secrets: SecretProvider) -> Webhook:
    try:
        app.registry.get(integration)
    except UnknownIntegrationError:
        raise Problem(404, "Not found", f"no integration named {integration!r} is declared") from None
    modes = {d.delivery_mode for d in app.registry if d.name == integration}
    if not any(rules_for(mode).success_means_accepted for mode in modes):
        # Not a deployment gap to retry (503): no version of it is followed by callbacks.
        raise Problem(404, "Not found", f"integration {integration!r} takes no callbacks: its delivery mode is "
                      f"{', '.join(sorted(m.value for m in modes))}, not callback")
    try:
        return load_verifier(integration, secrets)
    except CallbackSecretUnavailable as exc:
        log.warning("callback refused: not configured", integration=integration, problem=str(exc))
        raise Problem(503, "Callbacks not configured", str(exc),
                      headers={"Retry-After": str(RETRY_AFTER_SECONDS * 60)}) from None


def _parsed(raw: bytes) -> CallbackBody:
    # The command route's JSON rules first (``ledger.inbound.parse_json``): a repeated member is
    # refused, never "last wins" (a signed body saying "failed" then "succeeded" is not a
    # success), and too-deep nesting gets a clear message. Text the store cannot hold (NUL, a
    # lone surrogate) is not refused: it is stored escaped (``ledger.facts``).
    try:
        data = parse_json(raw)
    except BodyRefused as exc:
        raise Problem(422, "Invalid input", str(exc)) from None
    try:
        return CallbackBody.model_validate(data)
    except ValidationError as exc:
        errors = [{"location": ".".join(str(p) for p in e.get("loc", ())), "message": e.get("msg", "")}
                  for e in exc.errors()]
        raise Problem(422, "Invalid input", "; ".join(f"{e['location']}: {e['message']}" for e in errors),
                      errors=errors) from None


def _record_once(app: LedgerApplication, integration: str, body: CallbackBody, signed: SignedMessage,
                 now: datetime) -> CallbackReceipt | None:
    """Decide and record on the operation as stored; None when another writer won the version."""
    try:
        op = get_or_archived(app, body.operation_id)
    except OperationInArchiveError as archived:
        # Its records left the store: nothing may be appended to it (its history would start
        # past version 1), so the fact is kept apart, on the attention queue (ADR 0010 §4).
        kept = keep_late_callback(app, archived, integration=integration, callback_id=signed.callback_id,
                                  outcome=body.outcome, remote_status=body.remote_status, detail=body.detail, now=now)
        log.warning("callback for an archived operation kept for operators", operation_id=str(body.operation_id),
                    segment=f"seg-{archived.segment:06d}", callback_id=signed.callback_id, outcome=body.outcome,
                    duplicate=not kept)
        return CallbackReceipt(operation_id=str(body.operation_id), callback_id=signed.callback_id,
                               result="recorded" if kept else "duplicate", fact=LATE_AFTER_ARCHIVE if kept else None,
                               status="archived")
    except OperationNotFoundError:
        op = None
    if op is None or op.integration_name != integration:
        raise Problem(404, "Not found", f"no operation {body.operation_id} of integration {integration!r}")
    # Each authenticated callback for an operation, in a span of the operation's trace (DESIGN §9).
    with tracing.callback_span(integration=integration, operation_id=op.id, traceparent=op.traceparent,
                               callback_id=signed.callback_id, attempt_id=body.attempt_id) as span:
        receipt = _decide(app, op, body, signed, now)
        if span.is_recording():
            span.set_attribute(tracing.OUTCOME, receipt.result if receipt is not None else "conflict")
        return receipt


def _decide(app: LedgerApplication, op: Any, body: CallbackBody, signed: SignedMessage,
            now: datetime) -> CallbackReceipt | None:
    """Steps 5-7 on the operation as loaded; None when another writer won the version."""
    verdict = classify_callback(op, callback_id=signed.callback_id, attempt_id=body.attempt_id,
                                signed_at=signed.signed_at)
    if verdict is CallbackVerdict.REPLAYED:
        # The very bytes again (also when they raced their own first copy): refused, whichever
        # process recorded the first, so the answer does not depend on timing.
        log.warning("replayed callback refused", operation_id=str(op.id), callback_id=signed.callback_id)
        raise Problem(401, "Unauthenticated", f"replayed callback: message {signed.callback_id!r} with this "
                      "webhook-timestamp was already received; a provider's retry is signed again")
    if verdict is CallbackVerdict.DUPLICATE:
        return _receipt(op, signed.callback_id, "duplicate", None)
    if verdict is CallbackVerdict.UNKNOWN_ATTEMPT:
        raise Problem(404, "Not found", f"attempt {body.attempt_id} is not the latest attempt of operation {op.id}")
    try:
        recorded = op.receive_callback(now=now, callback_id=signed.callback_id, outcome=body.outcome,
                                       remote_status=body.remote_status, detail=body.detail,
                                       attempt_id=body.attempt_id, signed_at=signed.signed_at)
    except IllegalTransitionError as exc:
        raise Problem(409, "Conflict", f"operation {op.id} expects no callback now: {exc}") from None
    if not recorded:  # after an outcome: it agrees; before one: a progress report repeated
        return _receipt(op, signed.callback_id, "agrees_with_outcome" if op.execution in OUTCOME_STATES
                        else "unchanged", None)
    fact = type(op.pending_events[-1]).__name__
    try:
        save_refusable(app, op, WriteKind.CALLBACK, now)
    except IntegrityError:
        return None  # another writer moved the operation on: decide again on what it recorded
    except WriteRefusedError as exc:  # issue 35: that operation's problem, on the attention queue
        raise Problem(422, "Write refused", str(exc), code="write_refused") from None
    log.info("callback recorded", operation_id=str(op.id), callback_id=signed.callback_id, fact=fact,
             outcome=body.outcome)
    return _receipt(op, signed.callback_id, "recorded", fact)


def _receipt(op: Any, callback_id: str, result: Literal["recorded", "duplicate", "agrees_with_outcome", "unchanged"],
             fact: str | None) -> CallbackReceipt:
    return CallbackReceipt(operation_id=str(op.id), callback_id=callback_id, result=result, fact=fact,
                           status=op.status.value)
