"""The one redaction rule for every sink: stored events, projections, CLI, HTTP, logs, evidence.

A value to hide (a resolved secret, or an ``internal`` payload value on its way out of the
system) is matched in every form an echoing provider or a careless log line is likely to carry
it in: as is, JSON-escaped (``\\"``, ``\\/``, ``\\u00fc``, either hex case), URL-encoded
(``%2F`` and ``+`` for spaces, either hex case), base64 (standard and URL-safe, with or without
padding) and hex (either case). Longer matches win, so a value containing another is replaced
whole. Pure functions, plus :data:`KNOWN_SECRETS`, the process's record of secret values
resolved so far, which the log processor (``adapters.logs``) redacts from every log line.

Source: DESIGN §9 ("secret values never appear"); issue 14 item 3.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import quote, quote_plus, urlsplit, urlunsplit

__all__ = [
    "REDACTED",
    "KNOWN_SECRETS",
    "KnownSecrets",
    "forms_of",
    "redact",
    "mask_url",
    "url_has_credentials",
]

REDACTED = "[REDACTED]"
MAX_KNOWN_SECRETS = 10_000
"""Secret values a process remembers for log redaction; past this many the oldest are forgotten
(a worker resolves the same few secrets over and over)."""

_SURROGATE_SAFE = "surrogatepass"


def _json_forms(value: str) -> set[str]:
    forms = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    # Escaped solidus (PHP, some Ruby); upper-case \\uXXXX (Java, .NET) is matched by the pattern.
    forms |= {form.replace("/", "\\/") for form in list(forms)}
    return forms


def _url_forms(value: str) -> set[str]:
    raw = value.encode("utf-8", _SURROGATE_SAFE)
    # Lower-case %2f is matched by the pattern.
    return {quote(raw, safe=""), quote_plus(raw, safe=""), quote(raw, safe="/")}


def _binary_forms(value: str) -> set[str]:
    raw = value.encode("utf-8", _SURROGATE_SAFE)
    standard = base64.b64encode(raw).decode("ascii")
    urlsafe = base64.urlsafe_b64encode(raw).decode("ascii")
    hexed = binascii.hexlify(raw).decode("ascii")
    return {standard, standard.rstrip("="), urlsafe, urlsafe.rstrip("="), hexed}


@lru_cache(maxsize=4096)
def _forms_of(value: str) -> frozenset[str]:
    forms = {value} | _json_forms(value) | _url_forms(value) | _binary_forms(value)
    # A visible escape of what a terminal cannot show (as response excerpts write it).
    forms.add(value.encode("utf-8", _SURROGATE_SAFE).decode("utf-8", "backslashreplace"))
    return frozenset(form for form in forms if form)


def forms_of(value: str) -> frozenset[str]:
    """Return every form of ``value`` that :func:`redact` matches (empty for ``""``). Pure.

    Args:
        value: a value to hide (a secret, or an internal value leaving the system).

    Returns:
        The raw, JSON-escaped, URL-encoded, base64 and hex forms.
    """
    return _forms_of(value) if value else frozenset()


@lru_cache(maxsize=1024)
def _pattern(values: tuple[str, ...]) -> re.Pattern[str] | None:
    forms: set[str] = set()
    for value in values:
        forms |= forms_of(value)
    if not forms:
        return None
    # One alternation, longest first, so a value containing another is replaced whole.
    return re.compile("|".join(_form_pattern(form) for form in sorted(forms, key=len, reverse=True)))


_HEX_TEXT = re.compile(r"[0-9a-fA-F]+")
_ESCAPE_HEX = re.compile(r"%[0-9A-Fa-f]{2}|\\u[0-9A-Fa-f]{4}")


def _form_pattern(form: str) -> str:
    """The regular expression for one form: hex digits match in either case where they are
    hex (a hex dump, ``%2F``/``%2f``, ``\u00FC``/``\u00fc``), everything else exactly."""
    if _HEX_TEXT.fullmatch(form):
        return f"(?i:{form})"
    parts, last = [], 0
    for match in _ESCAPE_HEX.finditer(form):
        parts.append(re.escape(form[last:match.start()]))
        parts.append(f"(?i:{re.escape(match.group())})")
        last = match.end()
    parts.append(re.escape(form[last:]))
    return "".join(parts)


def redact(text: str, values: Iterable[str]) -> str:
    """Replace every form of each value in ``text`` with ``[REDACTED]``. Pure.

    Short values are redacted too: a garbled text is harmless, a leaked secret is not.

    Args:
        text: the text to clean (any ``str``, lone surrogates included).
        values: the values to hide; empty strings are ignored.

    Returns:
        ``text`` without any form (see :func:`forms_of`) of any of the values.

    Source: DESIGN §9; issue 14 item 3.
    """
    pattern = _pattern(tuple(sorted({v for v in values if isinstance(v, str) and v})))
    return pattern.sub(REDACTED, text) if pattern is not None else text


class KnownSecrets:
    """Secret values this process has resolved, for sinks that do not see the request (logs).

    Thread-safe; bounded by :data:`MAX_KNOWN_SECRETS` (oldest forgotten first).
    """

    def __init__(self) -> None:
        self._values: dict[str, None] = {}
        self._lock = threading.Lock()

    def add(self, value: str) -> None:
        """Remember ``value`` (ignored when empty)."""
        if not value:
            return
        with self._lock:
            self._values.pop(value, None)
            self._values[value] = None
            while len(self._values) > MAX_KNOWN_SECRETS:
                del self._values[next(iter(self._values))]

    def snapshot(self) -> tuple[str, ...]:
        """The values remembered now."""
        with self._lock:
            return tuple(self._values)

    def redact(self, text: str) -> str:
        """:func:`redact` with the values remembered now."""
        return redact(text, self.snapshot())


KNOWN_SECRETS = KnownSecrets()
"""This process's resolved secret values (filled by ``executors.secrets.resolve_payload``)."""


def url_has_credentials(url: str) -> bool:
    """True when ``url`` carries a user name or password (``https://user:pw@host/``). Pure."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "@" in url.split("/", 3)[2] if url.count("/") >= 2 else False
    return "@" in parts.netloc


_SECRET_QUERY = re.compile(r"([?&;](?:ssl)?password=)[^&;#]*", re.IGNORECASE)
"""Query parameters holding a secret: libpq's ``password`` and ``sslpassword`` (issue 34 item 1)."""


def mask_url(url: str) -> str:
    """Return ``url`` with its password (and any user info of an unparsable URL) replaced by
    ``***``, for error messages and logs; so are the values of ``password`` and ``sslpassword``
    query parameters (libpq's). Pure; never raises.

    Args:
        url: any URL text, e.g. a database URL.

    Returns:
        The URL safe to print.
    """
    try:
        parts = urlsplit(url)
        if "@" in parts.netloc:
            userinfo, host = parts.netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            masked = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
            url = urlunsplit(parts._replace(netloc=masked))
    except ValueError:
        url = re.sub(r"//[^/]*@", "//***@", url)
    return _SECRET_QUERY.sub(r"\1***", url)
