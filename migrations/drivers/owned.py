"""What the drivers of a store one process owns share (SQLite, memory; ADR 0008): no other
worker to reserve against, so reservations are refused and every intent is read, closed or not.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from migrations.drivers.protocols import ReservationHold


class OwnedStore:
    """Mixed into the driver of a store one process owns (``Reservations``, ``LogReads``)."""

    intents_only_open = False
    reservations_shared = False

    @contextmanager
    def reservations_hold(self) -> Iterator[ReservationHold]:
        """Refused: one process owns the store (``Reservations.reservations_hold``).

        Raises:
            ValueError: always.
        """
        raise ValueError("reservations are taken on the store's connection only where workers share the store")
        yield  # pragma: no cover - a generator, for contextmanager
