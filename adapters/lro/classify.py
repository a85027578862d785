"""Classification of long-running-operation exchanges (AIP-151 shape). Pure (STYLE rule 4).

An operation resource is ``{"name", "done", "metadata", "response" | "error"}``; ``error.code``
is a google.rpc.Code (1 is CANCELLED). The adapter gathers an
:class:`~adapters.webhook.classify.HttpExchange`; these functions decide what it says.

Source: AIP-151 (long-running operations); DESIGN §5 (HTTP classification); RFC 9110 §10.2.3.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from adapters.webhook.classify import (
    DEFAULT_MAX_RETRY_AFTER_SECONDS,
    MAX_REMOTE_ID_CHARS,
    HttpExchange,
    classify,
    parse_retry_after,
)
from ledger.outcomes import (
    Accepted,
    Ambiguous,
    CancelConfirmed,
    CancelOutcome,
    CancelRefused,
    Failed,
    FailureCategory,
    Outcome,
    PollResult,
    StillRunning,
    Succeeded,
)

CODE_CANCELLED = 1
"""google.rpc.Code CANCELLED: the operation was cancelled."""
LOST_STATUSES = frozenset({404, 410})
"""A poll answered with these: the provider no longer knows the operation."""
MAX_STATUS_CHARS = 64


def operation_name_of(headers: Mapping[str, str], body: bytes) -> str | None:
    """The operation a create response names: JSON ``name``, then the ``Operation-Location``
    header, then ``Location``, then JSON ``remote_id``/``id``; None when it names none. Pure."""
    document = _document(body)
    candidates: list[object] = []
    if document is not None:
        candidates.append(document.get("name"))
    candidates += [headers.get("operation-location"), headers.get("location")]
    if document is not None:
        candidates += [document.get("remote_id"), document.get("id")]
    for value in candidates:
        if isinstance(value, str) and value.strip() and len(value.strip()) <= MAX_REMOTE_ID_CHARS \
                and value.isprintable():
            return value.strip()
    return None


def classify_create(exchange: HttpExchange, *, now: datetime,
                    max_retry_after_seconds: float = DEFAULT_MAX_RETRY_AFTER_SECONDS) -> Outcome:
    """Decide the outcome of a create call. Pure.

    Returns:
        For a 2xx: the operation's result when it is already ``done`` (``Succeeded``, or
        ``Failed(REMOTE_FAILED)``), else ``Accepted(name)`` when the response names an operation
        (``operation_name_of``), else ``Succeeded``. Anything else as the webhook adapter
        classifies it (DESIGN §5).
    """
    status = exchange.status_code
    if exchange.failure is not None or status is None or not 200 <= status < 300:
        return classify(exchange, now=now, max_retry_after_seconds=max_retry_after_seconds)
    document = _document(exchange.body)
    if document is not None and document.get("done") is True:
        done = _done(document, exchange)
        if not isinstance(done, CancelConfirmed):
            return done
    name = operation_name_of(exchange.headers, exchange.body)
    if name is not None:
        return Accepted(remote_id=name, status_code=status, excerpt=exchange.excerpt)
    return Succeeded(status_code=status, excerpt=exchange.excerpt)


def classify_poll(exchange: HttpExchange, *, now: datetime,
                  max_retry_after_seconds: float = DEFAULT_MAX_RETRY_AFTER_SECONDS) -> PollResult:
    """Decide what a poll says. Pure.

    Returns:
        ``StillRunning`` for a transport failure, a 429/5xx (with its ``Retry-After``), another
        4xx, an unreadable body, or ``done: false`` (with ``metadata.state`` as the remote status,
        ``running`` when absent); ``Ambiguous(remote_lost)`` for 404/410; for ``done: true``
        ``Succeeded``, ``Failed(REMOTE_FAILED)`` or ``CancelConfirmed`` (code 1).
    """
    status = exchange.status_code
    hint = parse_retry_after(exchange.headers.get("retry-after"), now=now, max_seconds=max_retry_after_seconds)
    if exchange.failure is not None or status is None:
        return StillRunning(detail=exchange.excerpt)
    if status in LOST_STATUSES:
        return Ambiguous(reason="remote_lost", category=FailureCategory.REMOTE_FAILED, status_code=status,
                         detail=exchange.excerpt or "the provider no longer knows the operation")
    document = _document(exchange.body) if 200 <= status < 300 else None
    if document is None:
        return StillRunning(next_check_after=hint, detail=exchange.excerpt)
    if document.get("done") is True:
        return _done(document, exchange)
    metadata = document.get("metadata")
    state = metadata.get("state") if isinstance(metadata, dict) else None
    remote_status = state[:MAX_STATUS_CHARS] if isinstance(state, str) and state.isprintable() and state else "running"
    return StillRunning(next_check_after=hint, remote_status=remote_status)


def classify_cancel(exchange: HttpExchange, then: PollResult | None) -> CancelOutcome:
    """Decide what a cancel call and the poll that followed it say. Pure.

    Args:
        exchange: the ``:cancel`` exchange.
        then: the poll made right after a 2xx cancel, or None when none was made.

    Returns:
        ``CancelConfirmed`` when the operation is cancelled; ``CancelRefused`` (not retryable)
        for a 4xx or an operation that ended otherwise (its result is recorded by polling);
        ``CancelRefused(retryable=True)`` when the call failed or the cancel is still under way.
    """
    status = exchange.status_code
    if exchange.failure is not None or status is None or status >= 500 or status == 429:
        return CancelRefused(reason=f"cancel call failed: {exchange.excerpt or status}", retryable=True,
                             status_code=status)
    if not 200 <= status < 300:
        return CancelRefused(reason=f"the provider refused the cancel ({status}): {exchange.excerpt}",
                             status_code=status)
    if isinstance(then, CancelConfirmed):
        return then
    if isinstance(then, (Succeeded, Failed)):
        word = "completed" if isinstance(then, Succeeded) else "failed"
        return CancelRefused(reason=f"the operation {word} before the cancel took effect", status_code=status)
    return CancelRefused(reason="cancel accepted; the operation has not stopped yet", retryable=True,
                         status_code=status)


def _done(document: dict[str, Any], exchange: HttpExchange) -> Succeeded | Failed | CancelConfirmed:
    error = document.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        text = message if isinstance(message, str) else json.dumps(error)[:200]
        if error.get("code") == CODE_CANCELLED:
            return CancelConfirmed(detail=text)
        return Failed(FailureCategory.REMOTE_FAILED, retryable=False, status_code=exchange.status_code,
                      detail=f"remote operation failed: {text}")
    return Succeeded(status_code=exchange.status_code, excerpt=exchange.excerpt)


def _document(body: bytes) -> dict[str, Any] | None:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None
