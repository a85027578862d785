"""The webhook adapter's HTTP transport: one event loop and one ``aiohttp`` session per adapter,
and the bounded exchange every call makes on it (docs/adr/0009-egress-event-loop.md).

:meth:`EgressLoop.start` hands a call's coroutine to the loop's thread and returns its future at
once: the worker's egress starts calls so, without a thread per call in flight
(``ledger.egress.StartsCalls``, ADR 0009 step 2). The blocking seam (``send``/``lookup``/``poll``/
``cancel``, plain calls made by tests, scripts and workers with inline egress) waits on the same
future (:func:`wait`). Every call shares the session's connection pool, parser and TLS context,
so the HTTP work of thousands of calls in flight is done by one thread; issue 30 measured
130-170 µs of CPU per call this way against 700-1,100 µs for a thread-and-``httpx.Client`` per
call in flight.

Deadlines: the whole exchange (connect, TLS, sending, response headers, each redirect hop) runs
under one ``asyncio.timeout_at`` at the attempt's total deadline, so an endpoint dripping its
status line or headers a byte at a time is cut at the deadline (issue 14 item 6); the body is
read under the same instant in a separate scope, so a body cut short still reports the status
the provider sent. Whether any request byte may have left is known from the connection: a
failure before this exchange held a connection sent nothing (``TransportFailure.CONNECT``).
Name resolution runs in aiohttp's resolver thread and is bounded by the deadline too.

Source: issue 30 item 2; issue 14 item 6; DESIGN §5 (HTTP outcome classification).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import threading
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import certifi
from yarl import URL

from adapters.webhook.classify import MAX_REDIRECTS, HttpExchange, TransportFailure
from adapters.webhook.excerpt import excerpt, redact

__all__ = ["CLOSE_GRACE_SECONDS", "EgressLoop", "ExchangeLimits", "exchange", "failure_of", "header_text",
           "tls_context", "wait"]

_T = TypeVar("_T")

CLOSE_GRACE_SECONDS = 2.0
"""How long past a call's deadline its caller waits for the loop before it gives up on it (a
loop stalled by a bug must not hold a thread or an egress slot forever), seconds."""
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CROSS_ORIGIN_DROPPED = frozenset({"authorization", "cookie", "proxy-authorization"})


class _Progress:
    __slots__ = ("connected",)

    def __init__(self) -> None:
        self.connected = False


_progress: ContextVar[_Progress | None] = ContextVar("opledger_exchange_progress", default=None)


class _TrackingConnector(aiohttp.TCPConnector):
    """Notes on the exchange in progress (a context variable of its task) that it now holds a
    connection: from then on request bytes may leave, so a failure is no longer "not sent"."""

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        connection = await super().connect(req, traces, timeout)
        progress = _progress.get()
        if progress is not None:
            progress.connected = True
        return connection


def tls_context() -> ssl.SSLContext:
    """The TLS context every request verifies servers with: certifi's CA bundle, as httpx used,
    or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set. Made once per adapter (loading the bundle
    costs about 20 ms of CPU, issue 30)."""
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    return ssl.create_default_context(cafile=cafile or (None if capath else certifi.where()), capath=capath)


class EgressLoop:
    """One event loop on its own daemon thread with one ``aiohttp.ClientSession``, started on
    first use; thread-safe.

    The session keeps connections alive per host without a bound of its own: the worker bounds
    calls in flight (``executors.egress``, per host and in all). Responses are never decompressed
    (the byte bound must hold on what was received) and cookies are never kept.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None
        self._pid = 0  # the process whose thread runs the loop: a forked child starts its own

    def start(self, work: Callable[[aiohttp.ClientSession], Coroutine[Any, Any, _T]]) -> Future[_T]:
        """Start ``work(session)`` on the loop (starting the loop on first use) and return at once.

        Args:
            work: makes the call's coroutine, given the session; the coroutine bounds itself by
                the call's deadline and returns values, never raises.

        Returns:
            Its future, completed on the loop's thread (done-callbacks run there); cancelling it
            cancels the coroutine.
        """
        loop, session = self._started()
        return asyncio.run_coroutine_threadsafe(work(session), loop)

    def _started(self) -> tuple[asyncio.AbstractEventLoop, aiohttp.ClientSession]:
        with self._lock:
            if self._loop is None or self._session is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="egress-loop", daemon=True)
                thread.start()
                self._session = asyncio.run_coroutine_threadsafe(_open_session(), loop).result()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop, self._session

    @property
    def session(self) -> aiohttp.ClientSession:
        """The session (starting the loop if needed)."""
        return self._started()[1]

    def close(self) -> None:
        """Close the session and stop the loop; calls still running end unrecorded."""
        with self._lock:
            loop, thread, session = self._loop, self._thread, self._session
            self._loop = self._thread = self._session = None
        if loop is None or thread is None or session is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=CLOSE_GRACE_SECONDS)
        except Exception:  # closing is best effort: the process may be on its way out
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_GRACE_SECONDS)
        if not thread.is_alive():
            loop.close()


def wait(future: Future[_T], *, give_up_seconds: float, on_stall: Callable[[], _T]) -> _T:
    """Block the calling thread until ``future`` (:meth:`EgressLoop.start`) completes.

    Args:
        future: the call's future.
        give_up_seconds: how long to wait at most, seconds: the call's deadline plus
            ``CLOSE_GRACE_SECONDS``.
        on_stall: the result when the loop has not completed the call by then (it is cancelled).

    Returns:
        The coroutine's value, or ``on_stall()``.
    """
    try:
        return future.result(timeout=max(give_up_seconds, 0.0))
    except TimeoutError:
        future.cancel()
        return on_stall()


async def _open_session() -> aiohttp.ClientSession:
    connector = _TrackingConnector(limit=0, limit_per_host=0, ssl=tls_context())
    return aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                 cookie_jar=aiohttp.DummyCookieJar(), timeout=aiohttp.ClientTimeout(total=None))


@dataclass(frozen=True, slots=True)
class ExchangeLimits:
    """What one exchange reads and keeps: ``max_response_bytes`` of the body, ``excerpt_chars``
    of text (the adapter's ``WebhookConfig``)."""

    max_response_bytes: int
    excerpt_chars: int


def failure_of(exc: BaseException, *, connected: bool) -> TransportFailure:
    """What may have left this process when an exchange failed with ``exc``. Pure.

    Args:
        exc: what the request raised.
        connected: whether the exchange held a connection (request bytes may have left).

    Returns:
        ``INVALID_REQUEST`` for a request that cannot be built (URL, header); ``CONNECT`` for any
        failure before a connection was held; then ``TIMEOUT`` for the deadline and ``RESET``
        for anything else (the connection broke, the answer did not parse).
    """
    if isinstance(exc, (aiohttp.InvalidURL, ValueError, TypeError)) and not connected:
        return TransportFailure.INVALID_REQUEST
    if not connected:
        return TransportFailure.CONNECT
    if isinstance(exc, TimeoutError):
        return TransportFailure.TIMEOUT
    return TransportFailure.RESET


def header_text(raw: bytes) -> str:
    """A header value as text: ASCII or UTF-8 as sent, else Latin-1 (never a lone surrogate).
    Pure."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _bad_header(headers: Mapping[str, str]) -> str | None:
    for name, value in headers.items():
        if not name or any(c in name for c in "\r\n\0: \t") or any(c in value for c in "\r\n\0"):
            return f"header {name!r} holds a character HTTP does not allow"
    return None


async def exchange(session: aiohttp.ClientSession, method: str, url: str | URL, *, content: bytes | None,
                   headers: Mapping[str, str], deadline: float, follow_redirects: bool,
                   secrets: tuple[str, ...], limits: ExchangeLimits) -> HttpExchange:
    """One HTTP exchange bounded by ``deadline`` (``time.monotonic()``, the loop's clock), as
    facts for :func:`~adapters.webhook.classify.classify`; never raises for the provider's
    behaviour.

    Redirects are followed only when ``follow_redirects`` and the redirect keeps the method
    (307/308; 301-303 turn a POST into a GET, which would drop the payload), at most
    ``MAX_REDIRECTS`` hops, never to a URL with credentials or another scheme than HTTP(S);
    credentials headers are not sent to another origin.
    """
    def text(message: str) -> str:
        return excerpt(message.encode("utf-8", errors="surrogatepass"), limit_chars=limits.excerpt_chars,
                       secrets=secrets)

    problem = _bad_header(headers)
    if problem is not None:
        return HttpExchange(failure=TransportFailure.INVALID_REQUEST, sent=False, excerpt=text(problem))
    try:
        target = URL(str(url))
    except (ValueError, TypeError) as exc:
        return HttpExchange(failure=TransportFailure.INVALID_REQUEST, sent=False,
                            excerpt=text(f"{type(exc).__name__}: {exc}"))
    sent, hops, outgoing = False, 0, dict(headers)
    while True:
        progress = _Progress()
        token = _progress.set(progress)
        try:
            async with asyncio.timeout_at(deadline):
                response = await session.request(method, target, data=content, headers=outgoing,
                                                  allow_redirects=False)
        except Exception as exc:
            failure = failure_of(exc, connected=progress.connected)
            reason = "the attempt's total deadline passed" if isinstance(exc, TimeoutError) else str(exc)
            return HttpExchange(failure=failure, sent=sent or progress.connected,
                                excerpt=text(f"{type(exc).__name__}: {reason}"))
        finally:
            _progress.reset(token)
        sent = True
        try:
            follow = _redirect(response, target, method) if follow_redirects and hops < MAX_REDIRECTS else None
            if follow is not None:
                if follow.origin() != target.origin():
                    outgoing = {k: v for k, v in outgoing.items() if k.lower() not in _CROSS_ORIGIN_DROPPED}
                target, hops = follow, hops + 1
                continue
            body, complete = await _read_bounded(response, deadline, limits.max_response_bytes)
            merged: dict[str, str] = {}
            for raw_name, raw_value in response.raw_headers:
                name, value = header_text(raw_name).lower(), header_text(raw_value)
                merged[name] = f"{merged[name]}, {value}" if name in merged else value
            return HttpExchange(
                status_code=response.status,
                headers={name: redact(value, secrets) for name, value in merged.items()},
                body=body,
                excerpt=excerpt(body, limit_chars=limits.excerpt_chars, secrets=secrets, complete=complete),
                redirects_followed=hops,
            )
        finally:
            response.close()  # an unread or cut body must not put the connection back


def _redirect(response: aiohttp.ClientResponse, current: URL, method: str) -> URL | None:
    """Where a method-preserving redirect leads, or None when it is not one to follow."""
    if response.status not in _REDIRECTS or response.status in (301, 302, 303) and method != "GET":
        return None
    location = response.headers.get("Location")
    if not location:
        return None
    try:
        follow = current.join(URL(location))
    except (ValueError, TypeError):
        return None
    if follow.scheme not in ("http", "https") or follow.user is not None or follow.password is not None:
        return None
    return follow


async def _read_bounded(response: aiohttp.ClientResponse, deadline: float, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` body bytes, and whether that is the whole body; a read cut by the
    deadline or a broken connection keeps what came (the status already carries the decision)."""
    buffer = bytearray()
    try:
        async with asyncio.timeout_at(deadline):
            while len(buffer) <= limit:
                chunk = await response.content.read(limit + 1 - len(buffer))
                if not chunk:
                    return bytes(buffer), True
                buffer += chunk
    except (TimeoutError, aiohttp.ClientError, OSError):
        return bytes(buffer[:limit]), False
    return bytes(buffer[:limit]), False
