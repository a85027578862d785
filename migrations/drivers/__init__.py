"""Store drivers: one per backend, chosen once per store (ADR 0008).

Everything a backend does differently with the store's tables lives in its driver
(``sqlite``, ``postgres``, ``memory``); the rest of the code holds a driver, typed with the
narrowest protocol of :mod:`migrations.drivers.protocols` it uses, and never asks which one it
has. :func:`driver_of` is the one place that looks at a store's recorder to choose.

Source: ADR 0008; STYLE rule 19; issue 28 item 1.
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from ledger.config import Database
from migrations.drivers.protocols import (
    ArchiveCandidate,
    ArchiveLabels,
    Archives,
    DatabaseDriver,
    EventLoads,
    EventRow,
    LateRecord,
    LogReads,
    OpenIntents,
    Record,
    RecordedSegment,
    ReservationHold,
    Reservations,
    StoreDriver,
    StoreProbes,
    TopicCounts,
)

__all__ = [
    # choosing
    "driver_of", "driver_of_recorder", "archives_of", "archives_of_recorder",
    "database_driver", "DatabaseDriver", "memory_env",
    # the concerns
    "StoreDriver", "Archives", "EventLoads", "LogReads", "Reservations", "ReservationHold", "StoreProbes",
    "TopicCounts",
    # rows
    "Record", "EventRow", "OpenIntents", "ArchiveCandidate", "ArchiveLabels", "RecordedSegment", "LateRecord",
]

_chosen: WeakKeyDictionary[Any, StoreDriver] = WeakKeyDictionary()


def driver_of(app: Any) -> StoreDriver:
    """Return the driver of ``app``'s store, chosen from its recorder the first time and kept
    for that recorder (it goes with the store).

    Args:
        app: an eventsourcing ``Application`` (its ``recorder`` is the library's SQLite,
            PostgreSQL or in-memory application recorder, or a subclass of one).

    Raises:
        ValueError: the recorder is of none of those kinds.
    """
    return driver_of_recorder(app.recorder)


def driver_of_recorder(recorder: Any) -> StoreDriver:
    """:func:`driver_of` for a store's recorder (kept for that recorder)."""
    driver = _chosen.get(recorder)
    if driver is None:
        driver = _chosen[recorder] = _choose(recorder)
    return driver


def _choose(recorder: Any) -> StoreDriver:
    from eventsourcing.popo import POPOApplicationRecorder

    if isinstance(recorder, POPOApplicationRecorder):
        from migrations.drivers.memory import MemoryDriver

        return MemoryDriver(recorder)
    for base in type(recorder).__mro__:
        module = base.__module__
        if module.startswith("eventsourcing.sqlite"):
            from migrations.drivers.sqlite import SQLiteDriver

            return SQLiteDriver(recorder)
        if module.startswith("eventsourcing.postgres"):
            from migrations.drivers.postgres import PostgresDriver

            return PostgresDriver(recorder)
    raise ValueError(f"no store driver for a recorder of type {type(recorder).__qualname__}; "
                     "expected the library's SQLite, PostgreSQL or in-memory application recorder")


def archives_of(app: Any) -> Archives:
    """Return the archive methods of ``app``'s store (``Archives``): its driver's.

    Raises:
        ValueError: as :func:`driver_of`.
    """
    return archives_of_recorder(app.recorder)


def archives_of_recorder(recorder: Any) -> Archives:
    """:func:`archives_of` for a store's recorder.

    Raises:
        ValueError: as :func:`driver_of`.
    """
    return driver_of_recorder(recorder)


def memory_env() -> dict[str, str]:
    """Return the library environment of a store held in memory (the library's POPO recorder,
    whose driver is ``migrations.drivers.memory``): the simulator's and a dry run's store.

    Its factory (``migrations.drivers.recorders.LedgerPOPOFactory``) answers ``intend`` whether
    an id is archived, and its recorder's log leaves out records an archive run removed; the
    library's own (``eventsourcing.popo``) does neither."""
    return {"PERSISTENCE_MODULE": "migrations.drivers.recorders:LedgerPOPOFactory"}


def database_driver(database: Database) -> DatabaseDriver:
    """Return the database-level driver of ``database`` (whether processes share the store,
    its wake-ups, its description): the one place a configured backend is looked at.

    Args:
        database: the parsed database URL (``ledger.config.Database``).
    """
    if database.backend == "sqlite":
        from migrations.drivers.sqlite import SQLiteDatabase

        return SQLiteDatabase(database)
    from migrations.drivers.postgres import PostgresDatabase

    return PostgresDatabase(database)
