"""Pacing for background work that shares a store with live traffic: after each step, sleep a
fixed ratio of the time the step took.

``opledger archive`` runs beside workers and ``serve`` on the same database and the same cores.
Flat out it takes a whole process's share of both, and on a small machine the live rate drops
with it (docs/performance.md, the big store). A ratio of the step's own time adapts to the load
without a threshold to tune: when the database is slow the steps take longer, and so do the
pauses. The rule is the one gh-ost calls ``--nice-ratio`` and pt-archiver ``--sleep-coef``.

Source: issue 29 item 2 ("while workers and ``serve`` keep running") and its acceptance (the
end-to-end rate while an archive runs at least 0.8x the rate without).
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_NICE_RATIO = 1.0
"""``opledger archive``'s default: pause as long as each step took, so the run holds at most
half of one process's time (docs/operations.md, "Retention and archives")."""


class Pacer:
    """Sleep ``ratio`` times the time since the last :meth:`step` (or since creation).

    Args:
        ratio: seconds of pause per second of work, ``0`` (flat out) to ``100``.
        clock: monotonic seconds (injected for tests; ``time.monotonic``).
        sleep: sleeps its argument in seconds (injected for tests; ``time.sleep``).

    Raises:
        ValueError: ``ratio`` outside ``[0, 100]``.
    """

    def __init__(self, ratio: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not 0 <= ratio <= 100:
            raise ValueError(f"the nice ratio must be between 0 and 100, not {ratio}")
        self.ratio = ratio
        self._clock, self._sleep = clock, sleep
        self._since = clock()
        self.slept = 0.0
        """Seconds paused so far."""

    def step(self) -> None:
        """One step of work ended: pause for ``ratio`` times its length, then start the next."""
        worked = self._clock() - self._since
        if self.ratio and worked > 0:
            pause = worked * self.ratio
            self._sleep(pause)
            self.slept += pause
        self._since = self._clock()
