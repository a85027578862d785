"""Bounded, redacted, valid UTF-8 excerpts of what a provider sent back. Pure functions.

Only these excerpts are ever stored (in outcomes, hence in events and projections): never a raw
body, never a resolved secret value.

Source: DESIGN §9 ("secret values never appear"); ``ledger.outcomes`` (excerpt/detail fields).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ledger.egress import EgressRequest
from ledger.redaction import forms_of
from ledger.redaction import redact as _redact

DEFAULT_EXCERPT_CHARS = 2000
TRUNCATED_MARK = "…[truncated]"

# C0 and C1 controls other than tab and newlines: they can steer a terminal or hide text.
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def visible_text(raw: bytes) -> str:
    """Decode bytes to valid UTF-8 text. Pure.

    Invalid bytes and control characters other than tab and newlines become visible escapes
    (``\\xff``, ``\\x00``), so the result always survives ``.encode("utf-8")`` and a terminal.
    A literal backslash sequence in the input looks the same as an escape: the text is for
    people, not for round-tripping the bytes.

    Args:
        raw: any bytes.

    Returns:
        Valid text with no control characters except tab, newline and carriage return.
    """
    text = raw.decode("utf-8", errors="backslashreplace")
    return _CONTROL_CHARS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every form of each secret value in ``text`` with ``[REDACTED]``. Pure.

    The one rule of ``ledger.redaction.redact``: raw, JSON-escaped, URL-encoded, base64 and hex
    forms; longer matches win; short secrets are redacted too.

    Args:
        text: the text to clean.
        secrets: resolved secret values (never stored).

    Returns:
        ``text`` without any of the secret values.

    Source: DESIGN §9 ("secret values never appear"); issue 14 item 3.
    """
    return _redact(text, secrets)


def excerpt(raw: bytes, *, limit_chars: int = DEFAULT_EXCERPT_CHARS, secrets: Iterable[str] = (),
            complete: bool = True) -> str:
    """Make the storable excerpt of a response body: visible, redacted, bounded. Pure.

    Args:
        raw: the bytes read (already bounded by the reader).
        limit_chars: maximum length of the result in characters, truncation mark included.
        secrets: resolved secret values to redact.
        complete: False when ``raw`` is only a prefix of the body; a trailing fragment that could
            be the start of a secret is then dropped, and the result is marked truncated.

    Returns:
        Valid UTF-8 text of at most ``limit_chars`` characters.
    """
    values = tuple(secrets)
    text = _redact(visible_text(raw), values)
    forms = tuple(sorted({f for v in values for f in forms_of(v)}, key=len, reverse=True))
    if not complete:
        text = _drop_secret_prefix_tail(text, forms)
    if complete and len(text) <= limit_chars:
        return text
    return text[: max(limit_chars - len(TRUNCATED_MARK), 0)] + TRUNCATED_MARK


def secrets_of(request: EgressRequest) -> tuple[str, ...]:
    """Return the values to redact for ``request``: the non-empty entries of ``request.secrets``
    (filled by the worker: resolved secrets and ``internal`` payload text). Pure."""
    return tuple(secret for secret in request.secrets if secret)


def _drop_secret_prefix_tail(text: str, forms: tuple[str, ...]) -> str:
    for form in forms:
        for size in range(min(len(form) - 1, len(text)), 0, -1):
            if text.endswith(form[:size]):
                text = text[:-size]
                break
    return text
