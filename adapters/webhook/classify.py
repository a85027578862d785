"""Classification of one HTTP exchange into an honest outcome. Pure functions (STYLE rule 4).

The adapter gathers facts into an :class:`HttpExchange`; :func:`classify` decides, row by row,
as DESIGN §5 says. Whether an ``Ambiguous`` may be retried is the executor's decision by delivery
mode: these functions always report the honest value.

Source: DESIGN §5 (HTTP outcome classification); RFC 9110 §10.2.3 (Retry-After).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum

from adapters.webhook.excerpt import visible_text
from ledger.clock import require_utc
from ledger.outcomes import Accepted, Ambiguous, Failed, FailureCategory, Outcome, Succeeded
from ledger.redaction import mask_url

DEFAULT_MAX_RETRY_AFTER_SECONDS = 3600.0
MAX_REDIRECTS = 5
"""Redirect hops followed at most, and only in delivery modes where a repeat is harmless."""
MAX_REMOTE_ID_CHARS = 256
"""A longer ``remote_id``/``id``/``Location`` is not treated as naming a remote operation."""
MAX_HEADER_DETAIL_CHARS = 200

_DELTA_SECONDS = re.compile(r"[0-9]+")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_UTC = UTC


class TransportFailure(StrEnum):
    """How an exchange failed without a response, by what may have left this process."""

    CONNECT = "connect"
    """Before the request was sent: DNS, refused, TLS, connect or pool timeout, proxy."""
    INVALID_REQUEST = "invalid_request"
    """The request could not be built or sent as given (bad URL, scheme, header)."""
    TIMEOUT = "timeout"
    """A read or write timed out after request bytes may have left."""
    RESET = "reset"
    """The connection broke (reset, closed, protocol error) after request bytes may have left."""


@dataclass(frozen=True, slots=True)
class HttpExchange:
    """The facts of one HTTP exchange, the input of :func:`classify`.

    Attributes:
        status_code: the final response's status; None when there was no response.
        failure: why there was no response; None when there was one.
        sent: whether any request byte left this process (on any redirect hop).
        headers: the final response's headers, names lower-case, values redacted.
        body: the first ``max_response_bytes`` bytes of the final response body.
        excerpt: bounded, redacted, valid UTF-8 text of the body or of the transport error.
        redirects_followed: how many redirects were followed before the final response.
    """

    status_code: int | None = None
    failure: TransportFailure | None = None
    sent: bool = True
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    excerpt: str = ""
    redirects_followed: int = 0


def redirect_note(location: str, followed: int) -> str:
    """Why a final 3xx was not followed, counting the redirects that were. Pure.

    Args:
        location: the final response's ``Location``, masked and bounded.
        followed: redirects followed before it.

    Returns:
        ``"after N redirects, the limit, redirect to ... not followed"`` when the limit was
        reached, else why this one is not followed.

    Source: issue 34 item 5 (a loop said "not followed" after following five).
    """
    if followed >= MAX_REDIRECTS:
        return f"{followed} redirects followed, the limit; the next, to {location!r}, was not"
    return (f"redirect to {location!r} not followed (only method-preserving redirects, at most {MAX_REDIRECTS}, "
            "in idempotent or read_only mode, never to a URL with credentials)")


def classify(exchange: HttpExchange, *, now: datetime,
             max_retry_after_seconds: float = DEFAULT_MAX_RETRY_AFTER_SECONDS) -> Outcome:
    """Decide the honest outcome of one webhook delivery. Pure.

    The adapter always reports what it knows; whether an ``Ambiguous`` may be retried is the
    executor's decision by delivery mode.

    Args:
        exchange: what the exchange produced.
        now: the current instant (UTC-aware), for an HTTP-date ``Retry-After``.
        max_retry_after_seconds: upper bound for ``retry_after``, seconds.

    Returns:
        ``Failed(CONNECT|INVALID_REQUEST)`` when nothing was sent; ``Ambiguous`` for timeouts and
        resets after sending and for 5xx other than 503; ``Failed(THROTTLED, retry_after=...)``
        for 429 and 503; ``Failed(REJECTED)`` for other 4xx and unfollowed 3xx; ``Succeeded``, or
        ``Accepted`` for a 202 naming a remote operation.

    Raises:
        NaiveDatetimeError: ``now`` is naive (checked when a ``Retry-After`` needs it).

    Source: DESIGN §5, "HTTP outcome classification".
    """
    detail = exchange.excerpt
    if exchange.failure is not None or exchange.status_code is None:
        failure = exchange.failure or TransportFailure.RESET
        if failure is TransportFailure.INVALID_REQUEST:
            return Failed(FailureCategory.INVALID_REQUEST, retryable=False, egress=exchange.sent,
                          detail=detail)
        if failure is TransportFailure.CONNECT or not exchange.sent:
            return Failed(FailureCategory.CONNECT, retryable=True, egress=exchange.sent, detail=detail)
        return Ambiguous(reason=failure.value, category=FailureCategory.TIMEOUT, detail=detail)
    status = exchange.status_code
    if status in (429, 503):
        retry_after = parse_retry_after(exchange.headers.get("retry-after"), now=now,
                                        max_seconds=max_retry_after_seconds)
        return Failed(FailureCategory.THROTTLED, retryable=True, retry_after=retry_after,
                      status_code=status, detail=detail)
    if 300 <= status < 400:
        location = mask_url(visible_text(exchange.headers.get("location", "").encode()))[:MAX_HEADER_DETAIL_CHARS]
        note = redirect_note(location, exchange.redirects_followed)
        return Failed(FailureCategory.REJECTED, retryable=False, status_code=status,
                      detail=f"{note}; {detail}" if detail else note)
    if 400 <= status < 500:
        return Failed(FailureCategory.REJECTED, retryable=False, status_code=status, detail=detail)
    if 200 <= status < 300:
        return _success(exchange, accept_any_2xx=False)
    reason = "server_error" if 500 <= status < 600 else "unexpected_status"
    return Ambiguous(reason=reason, category=FailureCategory.SERVER_ERROR, status_code=status,
                     detail=detail)


def classify_lookup(exchange: HttpExchange) -> Outcome | None:
    """Decide what a "did you receive operation X?" lookup says. Pure.

    Args:
        exchange: the lookup's exchange.

    Returns:
        None for 404 (never received: safe to retry); ``Accepted`` for a 2xx naming a remote
        operation, else ``Succeeded``; ``Ambiguous(reason="lookup_failed")`` for anything else.

    Source: DESIGN §5, ``recoverable_remote_id`` row.
    """
    status = exchange.status_code
    if exchange.failure is not None or status is None:
        return Ambiguous(reason="lookup_failed", category=FailureCategory.TIMEOUT,
                         detail=exchange.excerpt)
    if status == 404:
        return None
    if 200 <= status < 300:
        return _success(exchange, accept_any_2xx=True)
    return Ambiguous(reason="lookup_failed", category=FailureCategory.SERVER_ERROR,
                     status_code=status, detail=exchange.excerpt)


def _success(exchange: HttpExchange, *, accept_any_2xx: bool) -> Succeeded | Accepted:
    remote_id = remote_id_of(exchange.headers, exchange.body)
    if remote_id is not None and (accept_any_2xx or exchange.status_code == 202):
        return Accepted(remote_id=remote_id, status_code=exchange.status_code, excerpt=exchange.excerpt)
    return Succeeded(status_code=exchange.status_code, excerpt=exchange.excerpt, remote_id=remote_id)


def remote_id_of(headers: Mapping[str, str], body: bytes) -> str | None:
    """Return the remote operation a response names: JSON ``remote_id``, then ``id``, then the
    ``Location`` header; None when it names none (or only one longer than
    :data:`MAX_REMOTE_ID_CHARS`). Pure."""
    candidates: list[object] = []
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        document = None
    if isinstance(document, dict):
        candidates += [document.get("remote_id"), document.get("id")]
    candidates.append(headers.get("location"))
    for value in candidates:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            continue
        text = str(value).strip()
        if text and len(text) <= MAX_REMOTE_ID_CHARS and not _CONTROL_CHARS.search(text):
            return text
    return None


def parse_retry_after(value: str | None, *, now: datetime, max_seconds: float) -> float | None:
    """Parse a ``Retry-After`` header into a delay from ``now``. Pure.

    Args:
        value: the header value: delta-seconds or an HTTP-date; None when absent.
        now: the current instant (UTC-aware) an HTTP-date is measured from.
        max_seconds: upper bound, seconds.

    Returns:
        The delay in seconds clamped to ``[0, max_seconds]`` (a date in the past gives 0), or
        None when the header is absent or malformed.

    Raises:
        NaiveDatetimeError: ``now`` is naive.

    Source: RFC 9110 §10.2.3 (Retry-After), DESIGN §5 (429/503 row).
    """
    if value is None:
        return None
    now = require_utc(now, "now")
    text = value.strip()
    if _DELTA_SECONDS.fullmatch(text):
        # Python refuses int() on very long digit strings; such a delay is past any bound anyway.
        seconds = float(int(text)) if len(text) <= 15 else math.inf
    else:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            # RFC 5322 '-0000' parses as naive; HTTP-dates are always GMT.
            when = when.replace(tzinfo=_UTC)
        seconds = (when - now).total_seconds()
    return min(max(seconds, 0.0), max_seconds)
