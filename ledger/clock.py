"""Injected UTC time (DESIGN §7). The only module in ``ledger`` that reads the wall clock.

Domain code takes ``now`` as an argument; services take a :class:`Clock`. The deterministic
simulator and the tests swap in :class:`FakeClock`. On PostgreSQL a worker's clock is a
:class:`ReferenceClock` that follows the database's clock, so every worker judges leases by the
same time (DESIGN §7: "lease expiry is judged by the database's clock").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from ledger.errors import NaiveDatetimeError

UTC = UTC


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


class OffsetClock:
    """Another clock shifted by a fixed offset: a clock that runs fast or slow, for tests of skew.

    Args:
        base: the clock to shift.
        seconds: the offset; positive runs ahead of ``base``, negative behind.
    """

    def __init__(self, base: Clock, seconds: float) -> None:
        self.base = base
        self.offset = timedelta(seconds=seconds)

    def now(self) -> datetime:
        """Return ``base.now()`` plus the offset."""
        return self.base.now() + self.offset


DEFAULT_MAX_SKEW_SECONDS = 2.0
"""How far a worker's own clock may be from the database's before it says so, seconds."""
SKEW_WARNING_INTERVAL_SECONDS = 60.0
"""How often a worker repeats that its clock is skewed, seconds (monotonic)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One reading of the reference clock, taken during a round trip.

    Attributes:
        reference: the reference clock's time (UTC), read at some instant of the round trip.
        monotonic: this process's monotonic clock at the round trip's midpoint, seconds.
        local: the local clock at the same midpoint (UTC).
        error_seconds: half the round trip: how far ``reference`` may be from the midpoint.
    """

    reference: datetime
    monotonic: float
    local: datetime
    error_seconds: float

    @property
    def offset_seconds(self) -> float:
        """The reference clock minus the local clock, seconds (positive: the local clock is slow)."""
        return (self.reference - self.local).total_seconds()


@dataclass(frozen=True, slots=True)
class SkewWarning:
    """The local clock is further from the reference than allowed: log it (the caller does).

    Attributes:
        offset_seconds: reference minus local, seconds (positive: the local clock is slow).
        error_seconds: the measurement's uncertainty, plus or minus, seconds.
        max_skew_seconds: the configured limit, seconds.
    """

    offset_seconds: float
    error_seconds: float
    max_skew_seconds: float


class ReferenceClock:
    """A clock that follows a reference clock (on PostgreSQL, the database's), so that every
    process comparing lease expiries with it uses the same time. Thread-safe.

    ``now()`` is the last reading of the reference plus the monotonic time elapsed since it, so
    neither the local clock's offset nor a step of it (NTP, an operator) moves it; the local clock
    is read only to measure and report its skew. Until the first reading, ``now()`` is the local
    clock's time.

    The reading of a statement is ``reference`` together with the monotonic times just before
    sending it and just after its answer: the reference was read somewhere in that round trip, so
    taking its midpoint is wrong by at most half the round trip (``Reading.error_seconds``).

    Args:
        local: this process's own clock (UTC), for the skew report and before the first reading.
        max_skew_seconds: a local clock further than this from the reference is reported, seconds.
        warn_every_seconds: how often :meth:`observe` repeats a skew warning, seconds.
        monotonic: the monotonic clock, seconds; injected by tests.

    Source: DESIGN §7 (one clock for leases on PostgreSQL); issue 10, item 4; ADR 0001 (the window
    that remains).
    """

    def __init__(self, local: Clock, *, max_skew_seconds: float = DEFAULT_MAX_SKEW_SECONDS,
                 warn_every_seconds: float = SKEW_WARNING_INTERVAL_SECONDS,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if not max_skew_seconds > 0 or not warn_every_seconds > 0:
            raise ValueError("max_skew_seconds and warn_every_seconds must be positive")
        self.local = local
        self.max_skew_seconds = max_skew_seconds
        self.warn_every_seconds = warn_every_seconds
        self._monotonic = monotonic
        self._reading: Reading | None = None  # replaced whole, so a reader sees one consistent reading
        self._lock = threading.Lock()
        self._warned_at: float | None = None

    @property
    def reading(self) -> Reading | None:
        """The last reading of the reference, or None before the first."""
        return self._reading

    def now(self) -> datetime:
        """Return the reference clock's current time, UTC, as extrapolated from the last reading."""
        reading = self._reading
        if reading is None:
            return require_utc(self.local.now(), "local time")
        return reading.reference + timedelta(seconds=self._monotonic() - reading.monotonic)

    def started(self) -> float:
        """Return the monotonic time, seconds: call just before sending the statement that reads
        the reference, and pass the value to :meth:`observe`."""
        return self._monotonic()

    def observe(self, reference: datetime, *, sent: float) -> SkewWarning | None:
        """Take a reading: ``reference`` was read during a round trip that began at ``sent``
        (from :meth:`started`) and has just ended.

        Args:
            reference: the reference clock's time (timezone-aware) from the answer.
            sent: the monotonic time the statement was sent, seconds.

        Returns:
            A :class:`SkewWarning` when the local clock is more than ``max_skew_seconds`` from
            the reference and none was returned in the last ``warn_every_seconds`` (the first
            one at once); otherwise None.

        Raises:
            NaiveDatetimeError: ``reference`` is naive.
        """
        received = self._monotonic()
        local = require_utc(self.local.now(), "local time")
        half = max(received - sent, 0.0) / 2
        reading = Reading(reference=require_utc(reference, "reference time"), monotonic=received - half,
                          local=local - timedelta(seconds=half), error_seconds=half)
        with self._lock:
            self._reading = reading
            return self._skew_warning(reading, received)

    def _skew_warning(self, reading: Reading, at: float) -> SkewWarning | None:
        if abs(reading.offset_seconds) <= self.max_skew_seconds:
            return None
        if self._warned_at is not None and at - self._warned_at < self.warn_every_seconds:
            return None
        self._warned_at = at
        return SkewWarning(offset_seconds=reading.offset_seconds, error_seconds=reading.error_seconds,
                           max_skew_seconds=self.max_skew_seconds)
