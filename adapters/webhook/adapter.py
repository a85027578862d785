"""The outbound HTTP webhook adapter: sign, POST, read a bounded response, classify.

This module is the request around the pure :func:`~adapters.webhook.classify.classify`: it builds
the signed request and hands it to :mod:`~adapters.webhook.transport` (one event loop and one
aiohttp session per adapter, docs/adr/0009-egress-event-loop.md), which follows only safe
redirects, reads at most ``max_response_bytes`` within the attempt's total deadline and turns what
happened into an :class:`~adapters.webhook.classify.HttpExchange`. Each call is one coroutine on
that loop: :meth:`WebhookAdapter.start_call` starts it and returns its future (the worker's
egress, with no thread per call; ``ledger.egress.StartsCalls``), the blocking ``send`` and
``lookup`` wait for it.

Source: DESIGN §5 (HTTP outcome classification), §7 (idempotency key, attempt id, traceparent);
Standard Webhooks specification (``webhook-id``/``webhook-timestamp``/``webhook-signature``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp
from standardwebhooks.webhooks import Webhook
from yarl import URL

from adapters.webhook.classify import (
    DEFAULT_MAX_RETRY_AFTER_SECONDS,
    HttpExchange,
    TransportFailure,
    classify,
    classify_lookup,
)
from adapters.webhook.excerpt import DEFAULT_EXCERPT_CHARS, TRUNCATED_MARK, excerpt, secrets_of
from adapters.webhook.secret import MAKE_SECRET, MAX_SECRET_BYTES, MIN_SECRET_BYTES, SECRET_PREFIX, secret_problem
from adapters.webhook.transport import CLOSE_GRACE_SECONDS, EgressLoop, ExchangeLimits, exchange, wait
from ledger.clock import Clock, require_utc
from ledger.declarations import canonical_json
from ledger.egress import NOT_STARTED, CallKind, EgressRequest, StartedCall
from ledger.errors import ConfigurationError
from ledger.modes import RULES, rules_for
from ledger.outcomes import Ambiguous, Failed, FailureCategory, Outcome

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024
DEFAULT_LOOKUP_PATH = "/idempotency/{key}"
DEFAULT_USER_AGENT = "opledger-webhook/0.1"
REDIRECT_SAFE_MODES = frozenset(rules.mode for rules in RULES.values() if rules.follows_redirects)
"""Modes whose requests may follow a method-preserving redirect (``ledger.modes``)."""

_RESERVED_HEADERS = frozenset({
    "accept-encoding", "content-length", "content-type", "host", "idempotency-key", "traceparent",
    "user-agent", "webhook-id", "webhook-signature", "webhook-timestamp", "x-attempt-id", "x-callback-url",
})
CALLBACK_URL_HEADER = "X-Callback-Url"
"""The header telling a ``callback``-mode provider where to post its signed result
(docs/adr/0005-callback-authentication.md)."""


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """Limits of the webhook adapter.

    Attributes:
        max_response_bytes: response body bytes read at most; the rest is never read.
        excerpt_chars: characters kept of a response or error text, including the truncation mark.
        max_retry_after_seconds: upper bound for a provider's ``Retry-After`` hint, seconds.
        lookup_path: path of the "did you receive X?" endpoint at the target's origin; ``{key}``
            is replaced by the operation id.
        user_agent: the ``User-Agent`` header.
        callback_base_url: where providers reach ``opledger serve``; a request in ``callback``
            mode carries ``X-Callback-Url: <callback_base_url>/callbacks/<integration>``. None
            sends none.

    Raises:
        ConfigurationError: a limit is not positive or ``lookup_path`` is malformed.
    """

    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    excerpt_chars: int = DEFAULT_EXCERPT_CHARS
    max_retry_after_seconds: float = DEFAULT_MAX_RETRY_AFTER_SECONDS
    lookup_path: str = DEFAULT_LOOKUP_PATH
    user_agent: str = DEFAULT_USER_AGENT
    callback_base_url: str | None = None

    def callback_url(self, request: EgressRequest) -> str | None:
        """The URL a ``callback``-mode provider posts its result to, or None (not that mode, or
        no base URL configured)."""
        if self.callback_base_url is None or not rules_for(request.delivery_mode).success_means_accepted:
            return None
        return f"{self.callback_base_url.rstrip('/')}/callbacks/{request.integration}"

    def __post_init__(self) -> None:
        if self.max_response_bytes < 1:
            raise ConfigurationError("max_response_bytes must be >= 1")
        if self.excerpt_chars <= len(TRUNCATED_MARK):
            raise ConfigurationError(f"excerpt_chars must be > {len(TRUNCATED_MARK)}")
        if not 0 <= self.max_retry_after_seconds < math.inf:
            raise ConfigurationError("max_retry_after_seconds must be finite and >= 0")
        if not self.lookup_path.startswith("/") or "{key}" not in self.lookup_path:
            raise ConfigurationError("lookup_path must start with '/' and contain '{key}'")


class WebhookAdapter:
    """Delivers operations as signed JSON webhooks over HTTP (``ledger.egress.Adapter``).

    Each request carries ``webhook-id`` (the operation id, stable across attempts),
    ``webhook-timestamp`` (from the injected clock), ``webhook-signature`` (computed by the
    ``standardwebhooks`` package over the canonical JSON body), ``Idempotency-Key`` (the operation
    id), ``X-Attempt-Id``, ``traceparent`` when given, and the entries of ``request.headers``
    except the headers above, which it cannot override. The resolved secrets in
    ``request.secrets`` are redacted from every excerpt and detail it returns. Receivers reject
    timestamps more than five minutes from their own wall clock, so a fake clock that has drifted
    from real time only works against in-process fakes.

    Args:
        secret: the Standard Webhooks signing secret (``whsec_`` + base64).
        clock: the injected clock; gives ``webhook-timestamp`` and ``now`` for ``Retry-After``.
        config: limits and paths.

    The adapter owns an event loop thread and an HTTP session, started on its first call and
    shared by every call (:mod:`~adapters.webhook.transport`); :meth:`start_call` starts a call
    there without blocking, the other methods block until theirs ends; :meth:`close` stops them.

    Raises:
        ConfigurationError: ``secret`` lacks the ``whsec_`` prefix, is not base64, or holds fewer
            than 24 bytes (Standard Webhooks: secrets of 24 to 64 random bytes); the message names
            ``opledger secret new`` (``adapters.webhook.secret``), which makes one.

    Source: DESIGN §5, §7; Standard Webhooks specification.
    """

    def __init__(self, *, secret: str, clock: Clock, config: WebhookConfig = WebhookConfig()) -> None:
        problem = secret_problem(secret)
        if problem:
            raise ConfigurationError(
                f"webhook secret is invalid: expected {SECRET_PREFIX!r} followed by base64 of {MIN_SECRET_BYTES} "
                f"to {MAX_SECRET_BYTES} random bytes (the Standard Webhooks format); {problem}; "
                f"make one with `{MAKE_SECRET}`")
        self._webhook = Webhook(secret)
        self._clock = clock
        self._config = config
        self._transport = EgressLoop()
        self._limits = ExchangeLimits(max_response_bytes=config.max_response_bytes,
                                      excerpt_chars=config.excerpt_chars)

    def send(self, request: EgressRequest) -> Outcome:
        """POST ``request.payload`` as signed JSON to ``request.target`` and classify the result.

        Args:
            request: the attempt; ``timeout_seconds`` is its total deadline: connect, TLS,
                sending, response headers, redirects and the body read together, however slowly
                the endpoint sends (``adapters.webhook.transport``).

        Returns:
            The outcome per :func:`classify`; a ``Failed(INVALID_REQUEST)`` when the target or
            payload cannot be sent.
        """
        outcome: Outcome = self._blocking("send", request)
        return outcome

    def lookup(self, request: EgressRequest) -> Outcome | None:
        """Ask the target's origin whether it received ``request.operation_id``.

        Sends a signed ``GET`` to ``config.lookup_path`` (body signed as empty).

        Args:
            request: the attempt whose operation is looked up.

        Returns:
            Per :func:`classify_lookup`: None when never received, ``Succeeded``/``Accepted``
            when received, ``Ambiguous(reason="lookup_failed")`` otherwise.
        """
        outcome: Outcome | None = self._blocking("lookup", request)
        return outcome

    def start_call(self, kind: CallKind, request: EgressRequest, remote_id: str | None = None, *,
                   may_start: Callable[[], bool] | None = None) -> StartedCall:
        """Start the call ``kind`` (``send`` or ``lookup``; the LRO adapter adds ``poll`` and
        ``cancel``) on this adapter's event loop and return at once (``ledger.egress.StartsCalls``).

        Args:
            may_start: asked on the loop before the request is built; False: nothing is sent,
                the future completes with ``NOT_STARTED``.

        Returns:
            The call's future (it completes with what the blocking method returns) and what a
            call the loop never ended stands for: a timeout after sending.

        Raises:
            ValueError: this adapter makes no call of ``kind``.
        """
        work, stalled, exchanges = self._plan(kind, request, remote_id)
        if may_start is not None:
            gate, call = may_start, work

            async def gated(session: aiohttp.ClientSession) -> Any:
                return await call(session) if gate() else NOT_STARTED

            work = gated
        return StartedCall(future=self._transport.start(work), stalled=stalled,
                           give_up_seconds=exchanges * request.timeout_seconds + CLOSE_GRACE_SECONDS)

    def _blocking(self, kind: CallKind, request: EgressRequest, remote_id: str | None = None) -> Any:
        started = self.start_call(kind, request, remote_id)
        return wait(started.future, give_up_seconds=started.give_up_seconds, on_stall=started.stalled)

    def _plan(self, kind: CallKind, request: EgressRequest, remote_id: str | None) -> _Plan:
        """The coroutine of a call of ``kind``, its value when the loop never ends it, and how
        many exchanges (each with the request's deadline) it makes one after the other."""
        if kind == "send":
            return (lambda session: self._send(session, request),
                    lambda: self._classify_sent(self._stalled(request)), 1)
        if kind == "lookup":
            return (lambda session: self._lookup(session, request),
                    lambda: classify_lookup(self._stalled(request)), 1)
        raise ValueError(f"{type(self).__name__} makes no {kind!r} calls")

    async def _send(self, session: aiohttp.ClientSession, request: EgressRequest) -> Outcome:
        secrets = secrets_of(request)
        if not _is_http_url(request.target):
            return self._invalid(f"target {request.target!r} is not an http(s) URL", secrets)
        assert request.target is not None  # _is_http_url said it is a string
        try:
            body_text = canonical_json(dict(request.payload)).decode("utf-8")
        except ValueError as exc:
            return self._invalid(f"payload is not plain JSON data: {exc}", secrets)
        now = require_utc(self._clock.now(), "clock.now()")
        headers = self._signed_headers(request, body_text, now)
        headers["Content-Type"] = "application/json"
        exchange = await self._exchange(session, "POST", request.target, content=body_text.encode("utf-8"),
                                        headers=headers, timeout_seconds=request.timeout_seconds,
                                        follow_redirects=rules_for(request.delivery_mode).follows_redirects,
                                        secrets=secrets)
        return self._classify_sent(exchange)

    def _classify_sent(self, exchange: HttpExchange) -> Outcome:
        """The outcome of :meth:`send`'s POST (:func:`classify`); an adapter that reads the
        answer differently (``adapters.lro``: a create call) overrides this, not ``send``."""
        return classify(exchange, now=self._clock.now(), max_retry_after_seconds=self._config.max_retry_after_seconds)

    async def _lookup(self, session: aiohttp.ClientSession, request: EgressRequest) -> Outcome | None:
        secrets = secrets_of(request)
        if not _is_http_url(request.target):
            return Ambiguous(reason="lookup_failed", category=FailureCategory.INVALID_REQUEST,
                             detail=self._text(f"target {request.target!r} is not an http(s) URL", secrets))
        assert request.target is not None  # _is_http_url said it is a string
        try:
            url = URL(request.target).join(URL(self._config.lookup_path.format(key=request.operation_id)))
        except (ValueError, TypeError) as exc:
            return Ambiguous(reason="lookup_failed", category=FailureCategory.INVALID_REQUEST,
                             detail=self._text(f"target {request.target!r} is not a URL: {exc}", secrets))
        headers = self._signed_headers(request, "", require_utc(self._clock.now(), "clock.now()"))
        exchange = await self._exchange(session, "GET", url, content=None, headers=headers,
                                        timeout_seconds=request.timeout_seconds, follow_redirects=True,
                                        secrets=secrets)
        return classify_lookup(exchange)

    def close(self) -> None:
        """Stop this adapter's event loop and close its HTTP session (its kept-alive connections)."""
        self._transport.close()

    def __enter__(self) -> WebhookAdapter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _signed_headers(self, request: EgressRequest, body_text: str, now: datetime) -> dict[str, str]:
        msg_id = str(request.operation_id)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _RESERVED_HEADERS}
        headers.update({
            "webhook-id": msg_id,
            "webhook-timestamp": str(math.floor(now.timestamp())),
            "webhook-signature": self._webhook.sign(msg_id, now, body_text),
            "Idempotency-Key": msg_id,
            "X-Attempt-Id": str(request.attempt_id),
            "User-Agent": self._config.user_agent,
            # Compressed bodies would make the byte bound meaningless (and invite bombs).
            "Accept-Encoding": "identity",
        })
        if request.traceparent:
            headers["traceparent"] = request.traceparent
        callback_url = self._config.callback_url(request)
        if callback_url is not None:
            headers[CALLBACK_URL_HEADER] = callback_url
        return headers

    async def _exchange(self, session: aiohttp.ClientSession, method: str, url: str | URL, *,
                        content: bytes | None, headers: Mapping[str, str], timeout_seconds: float,
                        follow_redirects: bool, secrets: tuple[str, ...]) -> HttpExchange:
        # One total deadline for connect, TLS, sending, headers, redirects and the body, from
        # when the loop runs the exchange: an endpoint dripping bytes cannot stretch the attempt
        # (issue 14 item 6).
        return await exchange(session, method, url, content=content, headers=headers,
                              deadline=time.monotonic() + timeout_seconds, follow_redirects=follow_redirects,
                              secrets=secrets, limits=self._limits)

    def _stalled(self, request: EgressRequest) -> HttpExchange:
        """What a call the loop did not end by its deadline (plus grace) stands for: a timeout
        after the request may have left."""
        return HttpExchange(failure=TransportFailure.TIMEOUT, sent=True, excerpt=self._text(
            "the egress loop did not end the call by its deadline", secrets_of(request)))

    def _text(self, text: str, secrets: tuple[str, ...]) -> str:
        return excerpt(text.encode("utf-8", errors="surrogatepass"),
                       limit_chars=self._config.excerpt_chars, secrets=secrets)

    def _invalid(self, reason: str, secrets: tuple[str, ...]) -> Failed:
        return Failed(FailureCategory.INVALID_REQUEST, retryable=False, egress=False,
                      detail=self._text(reason, secrets))


_Plan = tuple[Callable[[aiohttp.ClientSession], Coroutine[Any, Any, Any]], Callable[[], Any], int]
"""A call's coroutine (given the session), its value when given up on, and its exchanges."""


def _is_http_url(target: str | None) -> bool:
    return isinstance(target, str) and target.startswith(("http://", "https://"))
