"""The faults a simulation run injects, each drawn from the run's one seeded random source.

Every fault the run could inject is numbered in the order it is drawn. A run can be repeated
with some of those numbers disabled (the draw still happens, so the random stream stays the
same up to the first changed decision): that is how a failing seed is shrunk to the fewest
faults that still fail.

Source: issue 11 (faults drawn per call; failing seeds shrink).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum


class Fault(StrEnum):
    """A fault kind (the provider's, the network's, a worker's or the host's)."""

    REFUSED = "refused"
    """Connection refused before anything was sent: nothing applied."""
    RESPONSE_LOST = "response_lost"
    """The provider applied the effect; the response was lost (read timeout)."""
    APPLIED_5XX = "applied_5xx"
    """The provider applied the effect, then answered 500."""
    THROTTLED = "throttled"
    """429 with ``Retry-After``: nothing applied."""
    REJECTED = "rejected"
    """422: the provider refused the request for good; nothing applied."""
    SLOW = "slow"
    """The answer arrives after the worker's lease ran out."""
    LOOKUP_UNKNOWN = "lookup_unknown"
    """A "did you receive X?" lookup answers that it cannot tell (503)."""
    LOOKUP_FAILING = "lookup_failing"
    """A lookup's connection fails."""
    CRASH = "crash"
    """A worker process dies between two of its steps; its calls in flight are lost."""
    PAUSE = "pause"
    """A worker stops for longer than its lease (a GC pause), then carries on: a zombie."""
    STORE_DOWN = "store_down"
    """The store refuses a worker's step (a lost connection): the step's commit fails and the
    worker starts its cycle over, with the outcomes it holds kept."""
    ROW_REFUSED = "row_refused"
    """The store refuses one operation's events of one type from then on (a trigger, a
    constraint, a row-level security policy), and accepts every other write: that operation's
    problem (``WriteRefused``), never the worker's (issue 35)."""
    SETTLEMENT_RAISES = "settlement_raises"
    """The host's settlement method raises (once or a few times)."""
    CALLBACK_LATE = "callback_late"
    """A ``callback``-mode provider calls back after the ``accepted`` deadline
    (``adapters.simulation.callbacks``)."""
    CALLBACK_DUPLICATE = "callback_duplicate"
    """The provider sends its callback twice (the second signed again, later)."""
    CALLBACK_FORGED = "callback_forged"
    """An attacker sends a callback signed with another secret."""
    CALLBACK_REPLAYED = "callback_replayed"
    """An attacker re-sends the provider's callback byte for byte (inside or past the tolerance)."""
    CALLBACK_LOST = "callback_lost"
    """The provider never calls back."""
    POLL_FAILING = "poll_failing"
    """A poll of a long-running operation gets no answer (``adapters.simulation.lro``)."""
    CANCEL = "cancel"
    """An operator requests cancellation of a long-running operation at a drawn time."""


PROVIDER_FAULTS: dict[Fault, float] = {
    Fault.REFUSED: 0.04,
    Fault.RESPONSE_LOST: 0.05,
    Fault.APPLIED_5XX: 0.04,
    Fault.THROTTLED: 0.04,
    Fault.REJECTED: 0.02,
}
"""Per send: the chance of each provider fault (the rest: applied, 200)."""
LOOKUP_FAULTS: dict[Fault, float] = {Fault.LOOKUP_UNKNOWN: 0.15, Fault.LOOKUP_FAILING: 0.1}
"""Per lookup: the chance of each fault (the rest: the right answer)."""
SLOW_CHANCE = 0.03
"""Per call: the chance its answer takes longer than the lease."""
CRASH_CHANCE = 0.004
"""Per worker step: the chance the worker dies right before it."""
PAUSE_CHANCE = 0.002
"""Per worker step: the chance the worker pauses past its lease right before it."""
STORE_DOWN_CHANCE = 0.01
"""Per worker step: the chance the store refuses that step's writes."""
ROW_REFUSED_CHANCE = 0.01
"""Per worker step: the chance the store starts refusing one operation's events of one type."""
SETTLEMENT_FAULT_CHANCE = 0.1
"""Per operation: the chance its entity's settlement method raises, one to four times."""


@dataclass
class FaultPlan:
    """Draws faults from ``rng``; numbers each possible fault; skips the ``disabled`` ones.

    Attributes:
        rng: the run's random source (shared with everything else the run decides).
        disabled: numbers of faults not to inject (shrinking).
        injected: ``(number, kind)`` of each fault injected so far, in order.
        quiet: inject nothing more (the run's drain); nothing is drawn either.
    """

    rng: random.Random
    disabled: frozenset[int] = frozenset()
    injected: list[tuple[int, Fault]] = field(default_factory=list)
    quiet: bool = False
    _drawn: int = 0

    def chance(self, kind: Fault, probability: float) -> bool:
        """Draw one possible fault of ``kind``; True when it is injected."""
        if self.quiet:
            return False
        hit = self.rng.random() < probability
        if not hit:
            return False
        number, self._drawn = self._drawn, self._drawn + 1
        if number in self.disabled:
            return False
        self.injected.append((number, kind))
        return True

    def pick(self, table: dict[Fault, float]) -> Fault | None:
        """Draw at most one fault from ``table`` (kind -> chance); None when none is injected."""
        if self.quiet:
            return None
        roll, edge = self.rng.random(), 0.0
        for kind, probability in table.items():
            edge += probability
            if roll < edge:
                number, self._drawn = self._drawn, self._drawn + 1
                if number in self.disabled:
                    return None
                self.injected.append((number, kind))
                return kind
        return None

    def counts(self) -> Counter[str]:
        """Faults injected so far, by kind."""
        return Counter(kind.value for _, kind in self.injected)

    def numbers(self) -> Iterable[int]:
        """The numbers of the faults injected so far."""
        return [number for number, _ in self.injected]
