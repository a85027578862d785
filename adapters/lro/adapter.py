"""The long-running-operation adapter: create, poll and cancel an AIP-151-shaped operation.

The create call is a signed POST like a webhook (``adapters.webhook``: the same headers, total
deadline, bounded reads, redirect rules by delivery mode); its 2xx response names an operation
(``name`` in the body, or an ``Operation-Location`` or ``Location`` header). The operation name
is resolved against the create URL (RFC 3986 §5), so ``operations/abc`` created at
``https://p/v1/instances`` is polled at ``https://p/v1/operations/abc``, and an absolute path or
URL is used as given. ``poll`` is a signed ``GET`` of it, ``cancel`` a signed ``POST`` of
``<it>:cancel`` followed by one poll. Every answer is a value (STYLE rule 5): see
:mod:`.classify`.

Source: AIP-151; issue 12 items 1 and 4; ``ledger.egress.RemoteOperations``.
"""

from __future__ import annotations

import aiohttp
from yarl import URL

from adapters.lro.classify import classify_cancel, classify_create, classify_poll
from adapters.webhook.adapter import WebhookAdapter, _is_http_url, _Plan
from adapters.webhook.classify import HttpExchange, TransportFailure
from adapters.webhook.excerpt import secrets_of
from ledger.clock import require_utc
from ledger.egress import CallKind, EgressRequest
from ledger.outcomes import CancelOutcome, CancelRefused, Failed, FailureCategory, Outcome, PollResult, StillRunning

CANCEL_SUFFIX = ":cancel"
"""AIP-151's custom method for cancelling an operation."""


class LroAdapter(WebhookAdapter):
    """Starts and follows long-running operations (``ledger.egress.Adapter`` and
    ``ledger.egress.RemoteOperations``). Construct as :class:`~adapters.webhook.WebhookAdapter`
    (secret, clock, client, config).
    """

    def _classify_sent(self, exchange: HttpExchange) -> Outcome:
        """Read the answer to :meth:`send`'s POST as a create call
        (:func:`~adapters.lro.classify.classify_create`): ``Accepted(operation name)``, a result
        already done, or what the webhook adapter would classify."""
        return classify_create(exchange, now=self._clock.now(),
                               max_retry_after_seconds=self._config.max_retry_after_seconds)

    def poll(self, request: EgressRequest, remote_id: str) -> PollResult:
        """GET the operation (:func:`~adapters.lro.classify.classify_poll`)."""
        result: PollResult = self._blocking("poll", request, remote_id)
        return result

    def cancel(self, request: EgressRequest, remote_id: str) -> CancelOutcome:
        """POST ``<operation>:cancel``, then poll once to learn what it did
        (:func:`~adapters.lro.classify.classify_cancel`)."""
        result: CancelOutcome = self._blocking("cancel", request, remote_id)
        return result

    def _plan(self, kind: CallKind, request: EgressRequest, remote_id: str | None) -> _Plan:
        """Polls and cancels of ``remote_id``; sends and lookups as the webhook adapter's. A
        cancel makes two exchanges (the cancel, then a poll), each with the request's deadline."""
        if kind not in ("poll", "cancel"):
            return super()._plan(kind, request, remote_id)
        if remote_id is None:
            raise ValueError(f"a {kind} needs the remote operation's name")
        # Given up on, as the answer to a request that timed out after it was sent.
        if kind == "poll":
            return (lambda session: self._poll(session, request, remote_id),
                    lambda: classify_poll(self._stalled(request), now=self._clock.now(),
                                          max_retry_after_seconds=self._config.max_retry_after_seconds), 1)
        return (lambda session: self._cancel(session, request, remote_id),
                lambda: classify_cancel(self._stalled(request), None), 2)

    async def _poll(self, session: aiohttp.ClientSession, request: EgressRequest, remote_id: str) -> PollResult:
        exchange = await self._call(session, "GET", request, remote_id)
        if isinstance(exchange, Failed):
            return StillRunning(detail=exchange.detail)
        return classify_poll(exchange, now=self._clock.now(),
                             max_retry_after_seconds=self._config.max_retry_after_seconds)

    async def _cancel(self, session: aiohttp.ClientSession, request: EgressRequest, remote_id: str) -> CancelOutcome:
        exchange = await self._call(session, "POST", request, remote_id, suffix=CANCEL_SUFFIX)
        if isinstance(exchange, Failed):
            return CancelRefused(reason=exchange.detail)
        then = None
        if exchange.status_code is not None and 200 <= exchange.status_code < 300:
            then = await self._poll(session, request, remote_id)
        return classify_cancel(exchange, then)

    async def _call(self, session: aiohttp.ClientSession, method: str, request: EgressRequest, remote_id: str, *,
                    suffix: str = "") -> HttpExchange | Failed:
        secrets = secrets_of(request)
        if not _is_http_url(request.target):
            return self._invalid(f"target {request.target!r} is not an http(s) URL", secrets)
        assert request.target is not None
        try:
            url = URL(request.target).join(URL(remote_id + suffix))
        except (ValueError, TypeError) as exc:
            return self._invalid(f"operation name {remote_id!r} is not a URL reference: {exc}", secrets)
        if url.scheme not in ("http", "https"):
            return self._invalid(f"operation name {remote_id!r} resolves to a non-HTTP URL", secrets)
        body = "{}" if method == "POST" else ""
        headers = self._signed_headers(request, body, require_utc(self._clock.now(), "clock.now()"))
        if method == "POST":
            headers["Content-Type"] = "application/json"
        exchange = await self._exchange(session, method, url, content=body.encode() if body else None,
                                        headers=headers, timeout_seconds=request.timeout_seconds,
                                        follow_redirects=method == "GET", secrets=secrets)
        if exchange.failure is TransportFailure.INVALID_REQUEST:
            return Failed(FailureCategory.INVALID_REQUEST, retryable=False, egress=False, detail=exchange.excerpt)
        return exchange
