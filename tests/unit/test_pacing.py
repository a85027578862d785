"""The archive run's pacing (``adapters.pacing``): a pause of a fixed ratio of each step's time."""

from __future__ import annotations

import pytest

from adapters.pacing import Pacer


class Time:
    """A monotonic clock the test moves; ``sleep`` moves it too, and records each pause."""

    def __init__(self) -> None:
        self.now = 100.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_each_step_is_followed_by_ratio_times_its_own_length() -> None:
    time = Time()
    pacer = Pacer(0.5, clock=time.clock, sleep=time.sleep)
    time.now += 2.0
    pacer.step()
    time.now += 0.2
    pacer.step()
    assert time.pauses == pytest.approx([1.0, 0.1])  # the pause itself is not counted as the next step's work
    assert pacer.slept == pytest.approx(1.1)


def test_a_ratio_of_zero_never_sleeps() -> None:
    time = Time()
    pacer = Pacer(0, clock=time.clock, sleep=time.sleep)
    time.now += 5.0
    pacer.step()
    assert time.pauses == [] and pacer.slept == 0


@pytest.mark.parametrize("ratio", [-0.1, 100.5, float("nan")])
def test_a_ratio_outside_0_to_100_is_refused(ratio: float) -> None:
    with pytest.raises(ValueError, match="between 0 and 100"):
        Pacer(ratio)
