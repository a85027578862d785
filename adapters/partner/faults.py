"""Fault injection for the reference partner: what to do wrong, for which requests, how often.

A fault is chosen per request (the ``X-Partner-Fault`` header, ``status=503;retry_after=2;times=1``)
or per path (``POST /_control/faults`` with ``{"path": "/pay", "fault": {...}}``); the header wins.
Both spell a fault with the same keys:

============  ================================================================================
key           meaning
============  ================================================================================
status        respond with this status instead of the normal one
retry_after   send this ``Retry-After`` value (alone it implies ``status=503``)
delay         wait this many seconds before responding
drop          read the request, then close the connection without any response
body          a hostile response body: ``huge`` (5 MiB), ``nul`` (NUL bytes), ``invalid_utf8``
accept        answer a first delivery with ``202 {"remote_id": ...}``
redirect      respond ``307`` (or ``status``) with this ``Location``
apply         when the effect is applied: ``before`` the delay/drop/response, ``after`` the
              delay, or ``never``; default ``before`` when the response is 2xx, else ``never``
times         fault only the first N matching requests, then behave normally
============  ================================================================================

Source: DESIGN §5 (the outcomes each fault must produce at the adapter).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

FAULT_HEADER = "X-Partner-Fault"
HUGE_BODY_BYTES = 5 * 1024 * 1024
MAX_DELAY_SECONDS = 300.0
_TRUE = {"1", "true", "yes", "on", ""}
_FALSE = {"0", "false", "no", "off"}


class FaultError(ValueError):
    """A fault specification is malformed; the message names the key. Fix the spec."""


class ApplyTiming(StrEnum):
    """When a faulted delivery applies its effect."""

    BEFORE = "before"
    """Apply, then delay, drop or respond: a client timeout or a drop hides a real effect."""
    AFTER = "after"
    """Delay, then apply, then respond: the effect lands after a client may have given up."""
    NEVER = "never"
    """Do not apply (log only)."""


class HostileBody(StrEnum):
    """A response body meant to break careless clients."""

    HUGE = "huge"
    NUL = "nul"
    INVALID_UTF8 = "invalid_utf8"

    def render(self) -> bytes:
        """Return the body bytes."""
        if self is HostileBody.HUGE:
            return b"x" * HUGE_BODY_BYTES
        if self is HostileBody.NUL:
            return b'{"ok":\x00true}\x00\x00' + b"\x00" * 64
        return b'{"ok":"\xff\xfe\xc3\x28 \xed\xa0\x80 \xf0\x28\x8c\xbc"}'


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault specification (see the module docstring for each key).

    Raises:
        FaultError: a value is out of range.
    """

    status: int | None = None
    retry_after: str | None = None
    delay: float = 0.0
    drop: bool = False
    body: HostileBody | None = None
    accept: bool = False
    redirect: str | None = None
    apply: ApplyTiming | None = None
    times: int | None = None

    def __post_init__(self) -> None:
        if self.status is not None and not 100 <= self.status <= 599:
            raise FaultError("status must be 100..599")
        if not 0 <= self.delay <= MAX_DELAY_SECONDS:
            raise FaultError(f"delay must be 0..{MAX_DELAY_SECONDS:g} seconds")
        if self.times is not None and self.times < 1:
            raise FaultError("times must be >= 1")
        for name in ("retry_after", "redirect"):
            value = getattr(self, name)
            if value is not None and any(c in value for c in "\r\n"):
                raise FaultError(f"{name} must be a single header line")

    @classmethod
    def parse(cls, text: str) -> Fault:
        """Parse the header form, ``key=value;key=value`` (``drop`` and ``accept`` may be bare).

        Raises:
            FaultError: an unknown key or a malformed value.
        """
        items: dict[str, str] = {}
        for part in text.split(";"):
            if part.strip():
                key, _, value = part.partition("=")
                items[key.strip()] = value.strip()
        return cls.from_mapping(items)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Fault:
        """Build from JSON data or parsed header items (values may be strings).

        Raises:
            FaultError: an unknown key or a malformed value.
        """
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise FaultError(f"unknown fault keys: {sorted(unknown)}; known: {sorted(known)}")
        converters: dict[str, Callable[[Any], Any]] = {
            "status": _int, "times": _int, "delay": _seconds, "drop": _flag, "accept": _flag,
            "retry_after": str, "redirect": str, "body": HostileBody, "apply": ApplyTiming}
        values = {}
        for key, value in data.items():
            try:
                values[key] = converters[key](value)
            except (TypeError, ValueError) as exc:
                raise FaultError(f"fault key {key!r}: bad value {value!r} ({exc})") from None
        return cls(**values)

    def wire_status(self, normal: int) -> int | None:
        """Return the status to send instead of ``normal``; None means drop the connection."""
        if self.drop:
            return None
        if self.status is not None:
            return self.status
        if self.redirect is not None:
            return 307
        return 503 if self.retry_after is not None else normal

    def timing(self, wire_status: int | None) -> ApplyTiming:
        """Return when to apply the effect, given the status that will be sent."""
        if self.apply is not None:
            return self.apply
        ok = wire_status is not None and 200 <= wire_status < 300
        return ApplyTiming.BEFORE if ok else ApplyTiming.NEVER

    def describe(self) -> str:
        """Return the canonical header form of the keys that differ from no fault ('' if none)."""
        default = Fault()
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value != getattr(default, f.name):
                parts.append(f.name if value is True else f"{f.name}={value}")
        return ";".join(parts)


NO_FAULT = Fault()


class FaultBook:
    """Which fault applies to each request, and how often each has been used. Thread-safe.

    A header fault's ``times`` counts requests with the same idempotency key and the same header
    text, so a client retrying the same operation sees the fault N times and then the normal
    behaviour; once used up, the path's fault (if any) applies.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paths: dict[str, tuple[Fault, int]] = {}
        self._header_uses: Counter[tuple[str | None, str]] = Counter()

    def set_path(self, path: str, fault: Fault) -> None:
        """Fault every request to ``path`` (exact match) from now on, ``fault.times`` at most."""
        with self._lock:
            self._paths[path] = (fault, 0)

    def clear(self, path: str | None = None) -> None:
        """Remove the path fault for ``path``, or every path fault and header count."""
        with self._lock:
            if path is None:
                self._paths.clear()
                self._header_uses.clear()
            else:
                self._paths.pop(path, None)

    def choose(self, *, path: str, header: str | None, key: str | None) -> Fault:
        """Return the fault for one request and count its use (``NO_FAULT`` when none applies).

        Raises:
            FaultError: the header is malformed.
        """
        requested = Fault.parse(header) if header else None
        with self._lock:
            if requested is not None and header is not None:
                used = self._header_uses[(key, header)]
                if requested.times is None or used < requested.times:
                    self._header_uses[(key, header)] = used + 1
                    return requested
            if path in self._paths:
                fault, used = self._paths[path]
                if fault.times is None or used < fault.times:
                    self._paths[path] = (fault, used + 1)
                    return fault
        return NO_FAULT


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError("an integer is required")
    return int(value)


def _seconds(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError("a number of seconds is required")
    seconds = float(value)
    if not math.isfinite(seconds):
        raise ValueError("must be finite")
    return seconds


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("expected true or false")
