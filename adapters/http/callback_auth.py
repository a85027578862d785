"""Authenticating inbound callbacks with the Standard Webhooks scheme.

A callback is a JSON body signed by the provider with the integration's callback secret:
``webhook-id`` (the message id, the same on the provider's retries), ``webhook-timestamp`` (Unix
seconds) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of id.timestamp.body>``, computed by
the ``standardwebhooks`` library). The body names the operation and the attempt it answers, so
the signature binds the outcome to both (docs/adr/0005-callback-authentication.md).

The timestamp is checked against the injected clock with a configurable tolerance (default five
minutes, the specification's), before the signature; the library's own ``verify`` reads the
wall clock with a fixed tolerance, so this module uses the library's ``sign`` for the expected
signature and compares in constant time, as ``verify`` does.

The secret comes from the secret provider (``executors.secrets``) under the name
``callback.<integration>`` (environment ``OPLEDGER_SECRET_CALLBACK_<INTEGRATION>``, dots as
underscores). It is read per request, never logged, never stored, never echoed in a problem.

Source: Standard Webhooks specification ("Verifying webhook authenticity"); issue 12 item 3.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

from adapters.http.problems import Problem
from executors.secrets import MissingSecretError, SecretProvider

DEFAULT_TOLERANCE_SECONDS = 300.0
"""How far a callback's ``webhook-timestamp`` may be from now, seconds (Standard Webhooks'
recommendation: five minutes)."""
MAX_TOLERANCE_SECONDS = 3600.0
"""The largest tolerance ``OPLEDGER_CALLBACK_TOLERANCE_SECONDS`` accepts, seconds."""
SECRET_PREFIX = "whsec_"
MIN_SECRET_BYTES = 24  # Standard Webhooks: secrets of 24 to 64 random bytes
UNAUTHENTICATED = "Unauthenticated"
SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
"""The Standard Webhooks headers every callback carries."""


def callback_secret_name(integration: str) -> str:
    """The secret name holding ``integration``'s callback secret (``callback.<integration>``).

    With the default provider that is the environment variable
    ``OPLEDGER_SECRET_CALLBACK_<INTEGRATION>`` (upper case, dots as underscores)."""
    return f"callback.{integration}"


@dataclass(frozen=True, slots=True)
class SignedMessage:
    """An authenticated message's id and signing time.

    Attributes:
        callback_id: ``webhook-id``.
        signed_at: ``webhook-timestamp`` as a UTC datetime (whole seconds).
    """

    callback_id: str
    signed_at: datetime


class CallbackSecretUnavailable(Exception):
    """The integration has no usable callback secret configured (a deployment problem; its
    message names the setting, never a value)."""


def load_verifier(integration: str, secrets: SecretProvider) -> Webhook:
    """The Standard Webhooks verifier for ``integration``'s callback secret.

    Raises:
        CallbackSecretUnavailable: no secret, or one not in the ``whsec_`` + base64 format of
            24 to 64 bytes.
    """
    name = callback_secret_name(integration)
    try:
        secret = secrets.resolve(name)
    except MissingSecretError:
        raise CallbackSecretUnavailable(f"no callback secret is configured for integration {integration!r} "
                                        f"(secret {name!r}; e.g. OPLEDGER_SECRET_"
                                        f"{name.upper().replace('.', '_')})") from None
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
        ok = secret.startswith(SECRET_PREFIX) and len(key) >= MIN_SECRET_BYTES
        verifier = Webhook(secret) if ok else None
    except (binascii.Error, ValueError, RuntimeError):
        verifier = None
    if verifier is None:
        raise CallbackSecretUnavailable(f"the callback secret of integration {integration!r} is not "
                                        f"'{SECRET_PREFIX}' + base64 of {MIN_SECRET_BYTES} to 64 bytes")
    return verifier


def has_signature_headers(headers: Mapping[str, str]) -> bool:
    """Whether every one of :data:`SIGNATURE_HEADERS` is present and not empty.

    Args:
        headers: the request headers, names in lower case.
    """
    return all(headers.get(name) for name in SIGNATURE_HEADERS)


def signature_headers_missing() -> Problem:
    """The 401 for a callback without the Standard Webhooks headers (nothing else is checked)."""
    return Problem(401, UNAUTHENTICATED, "the callback lacks the Standard Webhooks headers webhook-id, "
                                         "webhook-timestamp and webhook-signature")


def authenticate(verifier: Webhook, headers: Mapping[str, str], body: bytes, *, now: datetime,
                 tolerance_seconds: float) -> SignedMessage:
    """Check a callback's Standard Webhooks headers against its raw body.

    Args:
        verifier: from :func:`load_verifier`.
        headers: the request headers (any case).
        body: the raw request body, exactly as received.
        now: UTC-aware instant (the injected clock).
        tolerance_seconds: largest allowed distance between ``webhook-timestamp`` and ``now``.

    Returns:
        The :class:`SignedMessage`.

    Raises:
        Problem: 401 (problem+json) for missing headers, a malformed or stale timestamp, a body
            that is not UTF-8, or no matching ``v1`` signature. The detail says which, never
            the expected signature.
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    if not has_signature_headers(lowered):
        raise signature_headers_missing()
    msg_id, stamp, signatures = (lowered[name] for name in SIGNATURE_HEADERS)
    if len(msg_id) > 255 or not msg_id.isprintable():
        raise Problem(401, UNAUTHENTICATED, "webhook-id must be 1 to 255 printable characters")
    try:
        seconds = int(stamp)
        signed_at = datetime.fromtimestamp(seconds, UTC)
    except (ValueError, OverflowError, OSError):
        raise Problem(401, UNAUTHENTICATED, "webhook-timestamp is not Unix seconds") from None
    skew = (now - signed_at).total_seconds()
    if abs(skew) > tolerance_seconds:
        when = "old" if skew > 0 else "far in the future"
        raise Problem(401, UNAUTHENTICATED, f"stale callback: webhook-timestamp is {abs(skew):.0f} s {when}; "
                                            f"the tolerance is {tolerance_seconds:g} s")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Problem(401, UNAUTHENTICATED, "the body is not UTF-8, so it cannot carry a valid signature") from None
    expected = base64.b64decode(verifier.sign(msg_id, signed_at, text).split(",", 1)[1])
    for candidate in signatures.split(" "):
        version, _, encoded = candidate.partition(",")
        if version != "v1":
            continue
        try:
            given = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(expected, given):
            return SignedMessage(callback_id=msg_id, signed_at=signed_at)
    raise Problem(401, UNAUTHENTICATED, "no webhook-signature matches the body under the integration's callback "
                                        "secret")
