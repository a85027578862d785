"""Received facts, stored as they came when they can be, else escaped and bounded. Pure.

Text that reaches the ledger from outside (a provider's remote id, response excerpt, failure or
ambiguity detail, a callback's status and detail, the adapter's reason strings) is recorded in
events, and the ledger codec refuses text it could not read back: lone surrogates (``\\ud800``,
which ``json.loads`` happily returns for a body holding ``"\\ud800"``) and NUL. A refused fact
used to fail the whole save and stop the worker; a huge one bloated every projection row.

:func:`storable_fact` is the one rule: text the codec accepts and within the bound for its kind
is stored unchanged; anything else is escaped visibly (``\\ud800``, ``\\x00``), cut to the bound
and marked with the sha256 of the original, so the original can still be matched later by
whoever holds it (``original_digest``). A fact is never dropped and never raises.

The ``Operation`` command methods that record received text call it (``succeed``, ``accept``,
``fail``, ``mark_ambiguous``, ``receive_callback``, ``schedule_retry``, ``observe_remote_status``,
``cancel_failed``): every path from an adapter, a lookup, a callback or the worker's own wording
passes through one of them.

Source: issue 10 item 3 ("a received fact that cannot be stored as it came ... is stored in a
bounded, escaped form with the original's sha256"); DESIGN §6 (strict codec); ``ledger.codec``.
"""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum

__all__ = [
    "FactKind",
    "MAX_FACT_CHARS",
    "ALTERED_MARK",
    "storable_fact",
    "storable_fact_or_none",
    "original_digest",
    "is_storable",
]


class FactKind(StrEnum):
    """What a received text is; each kind has its own bound (:data:`MAX_FACT_CHARS`)."""

    REMOTE_ID = "remote_id"
    """The provider's id for the effect or remote operation."""
    EXCERPT = "excerpt"
    """A response excerpt (already redacted and bounded by the adapter, usually)."""
    DETAIL = "detail"
    """Failure, ambiguity or callback detail for operators."""
    REASON = "reason"
    """A short machine-readable cause (``timeout``, ``server_error``) or retry reason."""
    STATUS = "status"
    """A remote status word reported by polling or a callback."""


MAX_FACT_CHARS: dict[FactKind, int] = {
    FactKind.REMOTE_ID: 512,
    FactKind.EXCERPT: 4096,
    FactKind.DETAIL: 4096,
    FactKind.REASON: 1024,
    FactKind.STATUS: 256,
}
"""Bound per kind, in characters (code points), marker included.

Remote ids: the webhook adapter already ignores ids over 256 characters
(``adapters.webhook.classify.MAX_REMOTE_ID_CHARS``); 512 leaves room for another adapter's longer
ids plus the marker. Excerpts and details: twice the webhook adapter's default excerpt (2,000),
so an adapter's own bound always wins and this one only stops what bypasses it. Reasons: a
retry reason repeats a failure's first line. Statuses: a word. Each is at least 256, more than
the marker needs (about 90).
"""

ALTERED_MARK = "…[stored escaped/cut; original sha256:{digest}]"
"""Appended to a fact that could not be stored as it came: ``{digest}`` is the original's sha256
in hex (of its UTF-8 bytes with ``surrogatepass``, see :func:`original_digest`)."""

# Lone surrogates (never valid in UTF-8) and NUL (refused by the codec: JSON cannot hold a raw
# one, and PostgreSQL text cannot hold one at all).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def original_digest(text: str) -> str:
    """Return the hex sha256 of ``text`` as received. Pure.

    Args:
        text: any Python text, lone surrogates included.

    Returns:
        64 hex digits: sha256 of ``text.encode("utf-8", "surrogatepass")``, the encoding that
        keeps every code point, so two different originals never share a digest by encoding.
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def is_storable(text: str) -> bool:
    """True when the ledger codec stores ``text`` exactly (no lone surrogate, no NUL). Pure."""
    return _UNSTORABLE.search(text) is None


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def storable_fact(text: str, kind: FactKind) -> str:
    """Return ``text`` in a form the ledger stores exactly and within the bound of ``kind``. Pure.

    Text without lone surrogates or NUL and within the bound is returned unchanged. Otherwise
    each lone surrogate and NUL is escaped visibly (``\\ud800``, ``\\x00``), the result cut to
    leave room for the marker, and :data:`ALTERED_MARK` appended with the original's sha256.
    A literal backslash in the original looks like an escape; the marker says the text was
    changed, and the digest matches the original. Applying it again changes nothing.

    Args:
        text: text received from outside (anything ``str``; other types are turned into text
            with ``str`` first, so a provider's numeric id is kept, not refused).
        kind: what the text is; picks the bound in :data:`MAX_FACT_CHARS`.

    Returns:
        Storable text of at most ``MAX_FACT_CHARS[kind]`` characters.

    Source: issue 10 item 3; ``ledger.codec`` (what the codec refuses).
    """
    if not isinstance(text, str):
        text = str(text)
    limit = MAX_FACT_CHARS[kind]
    if len(text) <= limit and is_storable(text):
        return text
    mark = ALTERED_MARK.format(digest=original_digest(text))
    # Escaping only lengthens, so escape at most what can be kept: a 1 GB body costs no more
    # than its first ``limit`` characters.
    kept = _UNSTORABLE.sub(_escape, text[:limit])
    return kept[: limit - len(mark)] + mark


def storable_fact_or_none(text: str | None, kind: FactKind) -> str | None:
    """:func:`storable_fact` for optional facts: None stays None. Pure."""
    return None if text is None else storable_fact(text, kind)


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception as a storable reason (:func:`storable_fact`:
    escaped and bounded, so it can be recorded on an event whatever the exception says)."""
    try:
        text = str(exc)
    except BaseException:  # an exception whose own str() raises still gets a reason
        text = "(its message could not be read)"
    return storable_fact(f"{type(exc).__name__}: {text}", FactKind.REASON)
