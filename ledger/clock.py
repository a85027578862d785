"""Injected UTC time (DESIGN §7). The only module in ``ledger`` that reads the wall clock.

Domain code takes ``now`` as an argument; services take a :class:`Clock`. The deterministic
simulator and the tests swap in :class:`FakeClock`.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Protocol

from ledger.errors import NaiveDatetimeError

UTC = timezone.utc


def require_utc(value: datetime, name: str = "time") -> datetime:
    """Return ``value`` converted to UTC, refusing naive datetimes.

    Args:
        value: a timezone-aware datetime.
        name: what the value is, for the error message.

    Returns:
        The same instant, with ``tzinfo=UTC``.

    Raises:
        NaiveDatetimeError: ``value`` has no timezone.
        TypeError: ``value`` is not a datetime.
    """
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise NaiveDatetimeError(f"{name} must be timezone-aware (UTC), got naive {value!r}")
    return value.astimezone(UTC)


class Clock(Protocol):
    """Source of the current time, UTC, timezone-aware."""

    def now(self) -> datetime:
        """Return the current instant in UTC."""
        ...


class SystemClock:
    """The real wall clock, UTC."""

    def now(self) -> datetime:
        """Return ``datetime.now(UTC)``."""
        return datetime.now(UTC)


class FakeClock:
    """A manually advanced clock for tests and the simulator. Thread-safe.

    Args:
        start: the first instant (UTC-aware); defaults to 2026-01-01T00:00:00Z.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = require_utc(start or datetime(2026, 1, 1, tzinfo=UTC), "start")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """Return the fake current instant."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        """Move time forward by ``seconds`` (may be fractional) and return the new instant."""
        if seconds < 0:
            raise ValueError("a clock never goes backwards")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, instant: datetime) -> None:
        """Jump to ``instant`` (UTC-aware, not earlier than now)."""
        instant = require_utc(instant, "instant")
        with self._lock:
            if instant < self._now:
                raise ValueError("a clock never goes backwards")
            self._now = instant
