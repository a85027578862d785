"""Opening a store's status view: the one place a status view backend is chosen.

Apart from ``projections.view`` (the protocols), so that the backends importing the protocols
and the chooser importing the backends make no import circle (issue 28 item 3).
"""

from __future__ import annotations

from ledger.config import Database
from migrations.drivers import database_driver
from migrations.drivers.sqlite import SQLiteDatabase
from projections.memory_view import MemoryStatusStore, MemoryStatusView
from projections.view import StatusView


def open_view(database: Database | MemoryStatusStore, *, read_only: bool = False) -> StatusView:
    """Open the status view of ``database``'s backend.

    Args:
        database: where the store lives (must be migrated), or an in-memory store
            (``MemoryStatusStore``: tests and the simulator), on which each call opens another
            view, as another connection would.
        read_only: SQLite only: open for inspection without taking part in writes.
    """
    if isinstance(database, MemoryStatusStore):
        return MemoryStatusView(database)
    driver = database_driver(database)
    if isinstance(driver, SQLiteDatabase):  # the status view of each database-level driver
        from projections.sqlite_view import SQLiteStatusView

        return SQLiteStatusView(database, read_only=read_only)
    from projections.postgres_view import PostgresStatusView

    return PostgresStatusView(database)
