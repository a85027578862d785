"""The clock that follows the database's (DESIGN §7; issue 10, item 4): a fake reference, a fake
monotonic clock and a local clock that is off by a known amount."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ledger.clock import FakeClock, OffsetClock, ReferenceClock, SkewWarning
from ledger.errors import NaiveDatetimeError

UTC = UTC
DB = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Monotonic:
    """A hand-driven monotonic clock, seconds."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _clock(local_offset: float, **kwargs: float) -> tuple[ReferenceClock, FakeClock, Monotonic]:
    """A reference clock whose local clock runs ``local_offset`` seconds from the database's
    (the fake reference: ``reference`` = ``DB`` plus the fake monotonic time elapsed)."""
    reference = FakeClock(DB)
    mono = Monotonic()
    clock = ReferenceClock(OffsetClock(reference, local_offset), monotonic=mono, **kwargs)
    return clock, reference, mono


def _round_trip(clock: ReferenceClock, reference: FakeClock, mono: Monotonic, *, before: float,
                after: float) -> SkewWarning | None:
    """Send at ``mono``, let the reference be read ``before`` seconds later, answer ``after`` later."""
    sent = clock.started()
    mono.t += before
    read = reference.advance(before)
    mono.t += after
    reference.advance(after)
    return clock.observe(read, sent=sent)


@pytest.mark.parametrize("local_offset", [15.0, -15.0, 0.0, 3600.0])
def test_now_is_the_reference_time_whatever_the_local_clock_says(local_offset: float) -> None:
    clock, reference, mono = _clock(local_offset)
    _round_trip(clock, reference, mono, before=0.002, after=0.002)
    assert clock.now() == reference.now()
    mono.t += 7.5
    reference.advance(7.5)
    assert clock.now() == reference.now(), "extrapolated by the monotonic clock, not the local one"


def test_offset_is_reference_minus_local_at_the_midpoint() -> None:
    clock, reference, mono = _clock(15.0)
    _round_trip(clock, reference, mono, before=0.01, after=0.01)
    reading = clock.reading
    assert reading is not None
    assert reading.offset_seconds == pytest.approx(-15.0)
    assert reading.error_seconds == pytest.approx(0.01)


@pytest.mark.parametrize("before, after", [(0.0, 0.2), (0.2, 0.0), (0.05, 0.15)])
def test_error_is_at_most_half_the_round_trip(before: float, after: float) -> None:
    # The reference may be read anywhere in the round trip: an asymmetric trip is the worst case.
    clock, reference, mono = _clock(-15.0)
    _round_trip(clock, reference, mono, before=before, after=after)
    reading = clock.reading
    assert reading is not None
    error = abs((clock.now() - reference.now()).total_seconds())
    assert error <= reading.error_seconds + 1e-9 == pytest.approx(0.1)


def test_a_step_of_the_local_clock_between_readings_does_not_move_now() -> None:
    local = FakeClock(DB)
    mono = Monotonic()
    clock = ReferenceClock(local, monotonic=mono)
    clock.observe(DB, sent=mono.t)
    local.advance(30)  # NTP steps the local clock
    mono.t += 1
    assert clock.now() == DB + timedelta(seconds=1)


def test_before_the_first_reading_now_is_the_local_clock() -> None:
    local = FakeClock(DB)
    clock = ReferenceClock(OffsetClock(local, 4), monotonic=Monotonic())
    assert clock.reading is None
    assert clock.now() == DB + timedelta(seconds=4)


def test_each_reading_replaces_the_last() -> None:
    clock, reference, mono = _clock(0.0)
    _round_trip(clock, reference, mono, before=0.001, after=0.001)
    mono.t += 10
    clock.observe(reference.now() + timedelta(seconds=0.5), sent=mono.t)  # the database's clock was stepped
    assert clock.now() == reference.now() + timedelta(seconds=0.5)


def test_skew_is_reported_at_once_then_once_a_minute() -> None:
    clock, reference, mono = _clock(15.0, max_skew_seconds=2.0)
    first = _round_trip(clock, reference, mono, before=0.001, after=0.001)
    assert first is not None and first.offset_seconds == pytest.approx(-15.0) and first.max_skew_seconds == 2.0
    warned_at = []
    for cycle in range(1, 241):  # two minutes of half-second cycles
        mono.t += 0.5
        reference.advance(0.5)
        if _round_trip(clock, reference, mono, before=0.0, after=0.0) is not None:
            warned_at.append(cycle * 0.5)
    assert warned_at == [60.0, 120.0]


@pytest.mark.parametrize("local_offset, warned", [(1.9, False), (-1.9, False), (2.1, True), (-2.1, True)])
def test_skew_within_the_limit_is_quiet(local_offset: float, warned: bool) -> None:
    clock, reference, mono = _clock(local_offset, max_skew_seconds=2.0)
    assert (_round_trip(clock, reference, mono, before=0.0, after=0.0) is not None) is warned


def test_a_naive_reference_time_is_refused() -> None:
    clock, _, mono = _clock(0.0)
    with pytest.raises(NaiveDatetimeError):
        clock.observe(datetime(2026, 3, 1), sent=mono.t)


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ReferenceClock(FakeClock(), max_skew_seconds=0)


def test_offset_clock_runs_fast_or_slow() -> None:
    base = FakeClock(DB)
    assert OffsetClock(base, 15).now() == DB + timedelta(seconds=15)
    assert OffsetClock(base, -15).now() == DB - timedelta(seconds=15)
