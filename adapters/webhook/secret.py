"""Standard Webhooks signing secrets: their format, what is wrong with one, and a fresh one.

A secret is ``whsec_`` followed by the standard base64 of 24 to 64 random bytes (Standard
Webhooks, "Signature scheme"). The webhook and ``lro`` adapters sign with one
(``OPLEDGER_WEBHOOK_SECRET``), providers sign callbacks with another
(``OPLEDGER_SECRET_CALLBACK_<INTEGRATION>``); ``opledger secret new`` prints a fresh one made by
:func:`new_secret`.

Source: Standard Webhooks specification ("Signature scheme"); issue 34 item 2.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable

from standardwebhooks.webhooks import Webhook

__all__ = [
    "SECRET_PREFIX", "MIN_SECRET_BYTES", "MAX_SECRET_BYTES", "DEFAULT_SECRET_BYTES", "MAKE_SECRET",
    "new_secret", "secret_problem",
]

SECRET_PREFIX = "whsec_"
MIN_SECRET_BYTES = 24
"""Fewest random bytes a secret may hold (Standard Webhooks: 24 to 64)."""
MAX_SECRET_BYTES = 64
"""Most random bytes :func:`new_secret` makes (Standard Webhooks: 24 to 64)."""
DEFAULT_SECRET_BYTES = 32
"""Random bytes in a new secret: 256 bits, the size of the HMAC-SHA256 key it becomes."""
MAKE_SECRET = "opledger secret new"
"""The command that prints a fresh secret, named by every error about a missing or bad one."""


def new_secret(size: int = DEFAULT_SECRET_BYTES, *,
               token_bytes: Callable[[int], bytes] = secrets.token_bytes) -> str:
    """Make a fresh Standard Webhooks secret: ``whsec_`` + base64 of ``size`` random bytes.

    Args:
        size: random bytes, ``MIN_SECRET_BYTES`` to ``MAX_SECRET_BYTES``.
        token_bytes: the source of random bytes (``secrets.token_bytes``; tests pass their own).

    Returns:
        The secret, e.g. ``whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwEjTnVwS7PSc=``.

    Raises:
        ValueError: ``size`` is outside 24 to 64.

    Source: Standard Webhooks specification ("Signature scheme"); issue 34 item 2.
    """
    if not MIN_SECRET_BYTES <= size <= MAX_SECRET_BYTES:
        raise ValueError(f"a secret holds {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} random bytes, not {size}")
    return SECRET_PREFIX + base64.b64encode(token_bytes(size)).decode("ascii")


def secret_problem(secret: str) -> str | None:
    """What is wrong with ``secret`` as a Standard Webhooks signing secret, without quoting it. Pure.

    Args:
        secret: the candidate secret.

    Returns:
        None for a usable secret, else e.g. ``it does not start with 'whsec_'``.

    Source: Standard Webhooks specification ("Signature scheme").
    """
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
        Webhook(secret)
    except Exception as exc:  # the library raises several unrelated types for a bad secret
        return f"it is not base64 (the library said {type(exc).__name__})"
    if not secret.startswith(SECRET_PREFIX):
        return f"it does not start with {SECRET_PREFIX!r}"
    if len(key) < MIN_SECRET_BYTES:
        return f"it holds {len(key)} bytes, the specification asks for {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES}"
    return None
