"""Egress on simulated time: a call reaches the provider a little after it is handed over, and
its answer comes back after a drawn latency (sometimes longer than the lease).

It is the worker's real :class:`~executors.egress.EgressService` (in-flight accounting, the
lease check before egress, adapter errors as outcomes), with the queue replaced by two
timetables the simulation's clock walks through. Nothing runs on a thread.

Source: issue 11 (how long a call takes is decided by the seed); DESIGN §7.
"""

from __future__ import annotations

import heapq
import random
from datetime import datetime, timedelta

from adapters.simulation.faults import SLOW_CHANCE, Fault, FaultPlan
from executors.calls import make_call
from executors.commit import Counts
from executors.egress import EgressConfig, EgressService
from executors.flights import Finished, InFlight
from ledger.clock import Clock

MAX_SEND_DELAY_SECONDS = 0.05
LATENCY_SECONDS = (0.01, 0.5)
"""An answer's usual latency, seconds (uniform)."""
SLOW_EXTRA_SECONDS = (1.0, 15.0)
"""A slow answer's latency beyond the lease, seconds (uniform)."""


class SimulatedEgress(EgressService):
    """The worker's egress, driven by the simulated clock.

    Args:
        clock: the simulated clock.
        faults: the run's fault plan (slow answers).
        rng: the run's random source (delays).
        slots: concurrent calls at most.
        lease_seconds: the workers' lease (a slow answer comes after it).
    """

    def __init__(self, *, clock: Clock, faults: FaultPlan, rng: random.Random, slots: int,
                 lease_seconds: float) -> None:
        super().__init__(clock=clock, config=EgressConfig(slots=slots, per_host=slots, inline=True))
        self.faults = faults
        self.rng = rng
        self.lease_seconds = lease_seconds
        self._sends: list[tuple[datetime, int, InFlight]] = []
        self._answers: list[tuple[datetime, int, Finished]] = []
        self._sequence = 0

    def submit(self, flight: InFlight) -> None:
        """Schedule ``flight``'s call: it reaches the provider up to 50 ms from now."""
        self.track(flight)
        at = self.clock.now() + timedelta(seconds=self.rng.uniform(0, MAX_SEND_DELAY_SECONDS))
        heapq.heappush(self._sends, (at, self._next(), flight))

    def run_once(self, now: datetime) -> Counts:
        """Make the calls due by ``now`` (the provider applies them then) and hand back the
        answers due by ``now``, in time order."""
        while self._sends and self._sends[0][0] <= now:
            at, _, flight = heapq.heappop(self._sends)
            finished = make_call(flight, self.clock)
            latency = self.rng.uniform(*LATENCY_SECONDS)
            if self.faults.chance(Fault.SLOW, SLOW_CHANCE):
                latency = self.lease_seconds + self.rng.uniform(*SLOW_EXTRA_SECONDS)
            heapq.heappush(self._answers, (at + timedelta(seconds=latency), self._next(), finished))
        while self._answers and self._answers[0][0] <= now:
            self.finish(heapq.heappop(self._answers)[2])
        return Counts()

    def next_event_at(self) -> datetime | None:
        """When the next call or answer is due, or None when none is pending."""
        times = [queue[0][0] for queue in (self._sends, self._answers) if queue]
        return min(times) if times else None

    def _next(self) -> int:
        self._sequence += 1
        return self._sequence
