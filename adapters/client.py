"""A client for keyed commands: one fresh ``Idempotency-Key`` per logical request, the same key on
every retry of it, and backoff on ``409 idempotency_receipt_pending`` and ``503`` honouring
``Retry-After`` (retries by tenacity).

    from adapters.client import CommandClient

    with CommandClient("http://127.0.0.1:8000", token="...") as client:
        response = client.send("place_order", {"customer_email": "a@example.test", "amount_cents": 1250})

Source: issue 15 item 7; IETF draft-ietf-httpapi-idempotency-key-header-07.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception_type, retry_if_result, stop_after_attempt

DEFAULT_MAX_ATTEMPTS = 6
"""Tries per logical request (the first and five retries)."""
DEFAULT_BACKOFF_SECONDS = 0.5
"""The first backoff without a ``Retry-After``, seconds; doubled per retry."""
DEFAULT_MAX_WAIT_SECONDS = 30.0
"""The longest wait between tries, seconds (a larger ``Retry-After`` is cut to it)."""
RETRYABLE_STATUSES = frozenset({409, 503})


def format_key(key: str) -> str:
    """``key`` as the RFC 8941 sf-string the ``Idempotency-Key`` header carries.

    Raises:
        ValueError: an empty key, or one with a character an sf-string cannot hold.
    """
    if not key or any(not 0x20 <= ord(c) <= 0x7E for c in key):
        raise ValueError("an idempotency key is 1 or more printable ASCII characters")
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def is_retryable(response: httpx.Response) -> bool:
    """Whether the same request with the same key should be sent again: 503, or a 409 whose
    problem says the receipt is pending (another 409 is the command's own answer)."""
    if response.status_code == 503:
        return True
    if response.status_code != 409:
        return False
    try:
        return bool(response.json().get("code") == "idempotency_receipt_pending")
    except ValueError:
        return False


class CommandClient:
    """Sends commands to ``opledger serve`` with idempotency keys.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        token: a bearer token from ``OPLEDGER_API_TOKENS``.
        client: an ``httpx.Client`` to use (its base URL is ignored); one is made otherwise.
        max_attempts: tries per logical request.
        backoff_seconds: first backoff without ``Retry-After``, doubled per retry, seconds.
        max_wait_seconds: the longest wait between tries, seconds.
        sleep: how to wait (tests inject a fake).
    """

    def __init__(self, base_url: str, *, token: str, client: httpx.Client | None = None,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS, backoff_seconds: float = DEFAULT_BACKOFF_SECONDS,
                 max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}
        self.http = client or httpx.Client(timeout=30)
        self._owns_client = client is None
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.max_wait_seconds = max_wait_seconds
        self.sleep = sleep

    def send(self, name: str, body: Any, *, key: str | None = None) -> httpx.Response:
        """Send command ``name`` once, logically: a fresh key (unless given), reused on retries.

        Args:
            name: the command's name.
            body: plain JSON data (the command's request model).
            key: the key to use (e.g. one persisted before a crash); a new UUID when None. An
                empty key is refused, never replaced (a persisted empty key would otherwise
                become a fresh key on every retry and run the command again).

        Returns:
            The final response: the command's answer (or its replay), or the last retryable
            answer when the tries ran out.

        Raises:
            ValueError: ``key`` is empty or holds a character an sf-string cannot (nothing sent).
            httpx.TransportError: the server could not be reached on the last try.
        """
        headers = {**self.headers, "Idempotency-Key": format_key(key if key is not None else str(uuid.uuid4())),
                   "Content-Type": "application/json"}
        url = f"{self.base_url}/v1/commands/{name}"
        retrying = Retrying(stop=stop_after_attempt(self.max_attempts), wait=self._wait, sleep=self.sleep,
                            retry=retry_if_result(is_retryable) | retry_if_exception_type(httpx.TransportError),
                            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
                            reraise=True)
        response: httpx.Response = retrying(self.http.post, url, json=body, headers=headers)
        return response

    def _wait(self, state: RetryCallState) -> float:
        """The wait before the next try, seconds: the larger of the server's ``Retry-After`` (the
        least wait, RFC 9110 §10.2.3) and the doubling backoff, at most ``max_wait_seconds``."""
        backoff = self.backoff_seconds * 2 ** (state.attempt_number - 1)
        outcome = state.outcome
        if outcome is not None and not outcome.failed:
            hinted = outcome.result().headers.get("Retry-After")
            if hinted is not None and hinted.isdigit():
                return min(max(float(hinted), backoff), self.max_wait_seconds)
        return min(backoff, self.max_wait_seconds)

    def close(self) -> None:
        if self._owns_client:
            self.http.close()

    def __enter__(self) -> CommandClient:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
