"""A total deadline for one attempt that no endpoint can stretch (issue 14 item 6).

httpx's timeouts bound each network operation: a read timeout of 3 s restarts with every byte,
so an endpoint that drips its status line or headers one byte a second held attempts for minutes
(and their leases kept being renewed). httpx has no total timeout, and httpcore reads the
response headers in a loop it owns. The seam it offers is the network backend
(``httpcore.NetworkBackend``): :class:`DeadlineBackend` wraps the default one, and every
connect, TLS handshake, read and write of a stream it made is bounded by what is left of the
deadline the calling thread set with :func:`attempt_deadline`. When nothing is left, the
operation raises httpcore's own ``ConnectTimeout``/``ReadTimeout``/``WriteTimeout``, which httpx
turns into its timeouts and the adapter classifies as today (a read timeout after sending is
ambiguous unless the mode makes a retry safe).

The deadline is per thread: each egress thread makes one call at a time (ADR 0002), and a kept
alive connection reused by the next call reads the new call's deadline.

Known limit: name resolution (``getaddrinfo`` inside ``socket.create_connection``) is not
interruptible from Python; a resolver that hangs can outlast the deadline.

Source: issue 14 item 6; httpcore's ``NetworkBackend`` interface (``httpcore._backends.base``).
"""

from __future__ import annotations

import math
import threading
import time
import typing
from collections.abc import Iterator
from contextlib import contextmanager

import httpcore
import httpx
from httpcore._backends.base import SOCKET_OPTION, NetworkBackend, NetworkStream

__all__ = ["DeadlineBackend", "attempt_deadline", "install_deadlines", "remaining_seconds"]

_local = threading.local()


@contextmanager
def attempt_deadline(seconds: float) -> Iterator[float]:
    """Bound every network operation of this thread for the next ``seconds`` (monotonic).

    Args:
        seconds: the attempt's total budget, seconds (finite, > 0).

    Yields:
        The deadline as a ``time.monotonic()`` value.
    """
    previous = getattr(_local, "deadline", None)
    deadline = time.monotonic() + seconds
    _local.deadline = deadline
    try:
        yield deadline
    finally:
        _local.deadline = previous


def remaining_seconds() -> float:
    """Seconds left of this thread's attempt deadline (``inf`` when none is set)."""
    deadline: float | None = getattr(_local, "deadline", None)
    return math.inf if deadline is None else deadline - time.monotonic()


def _bounded(timeout: float | None, error: type[Exception], what: str) -> float | None:
    left = remaining_seconds()
    if left == math.inf:
        return timeout
    if left <= 0:
        raise error(f"the attempt's total deadline passed before {what}")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(NetworkStream):
    def __init__(self, inner: NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout, "reading"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout, "writing"))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: typing.Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout, "the TLS handshake")
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(NetworkBackend):
    """A network backend whose streams honour :func:`attempt_deadline`.

    Args:
        inner: the backend to wrap (httpcore's default sync backend when omitted).
    """

    def __init__(self, inner: NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: typing.Iterable[SOCKET_OPTION] | None = None) -> NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout, "connecting")
        return _DeadlineStream(self._inner.connect_tcp(host, port, bounded, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: typing.Iterable[SOCKET_OPTION] | None = None) -> NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout, "connecting")
        return _DeadlineStream(self._inner.connect_unix_socket(path, bounded, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def install_deadlines(client: httpx.Client) -> bool:
    """Make ``client``'s HTTP transports (and proxy mounts) honour :func:`attempt_deadline`.

    httpx does not let a caller choose httpcore's network backend, so this sets the connection
    pool's backend attribute; ``tests/unit/test_webhook_deadline.py`` fails if an httpx or
    httpcore upgrade moves it. Transports that are not httpx's (``MockTransport``) are left
    alone.

    Returns:
        True when every transport of ``client`` now honours the deadline.
    """
    transports = [client._transport, *(t for t in client._mounts.values() if t is not None)]
    done = True
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if isinstance(backend, DeadlineBackend):
            continue
        if isinstance(backend, NetworkBackend):
            pool._network_backend = DeadlineBackend(backend)  # type: ignore[union-attr]
        else:
            done = False
    return done
