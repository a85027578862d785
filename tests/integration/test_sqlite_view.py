"""SQLite's status view: what the conformance suite cannot see through the protocol."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from adapters.demo.orders import OrdersApp
from ledger.config import Database
from projections.view import MAIN_TABLE
from projections.views import open_view
from tests.stores import migrated_store


def _indexes(path: Path, kind: str = "index") -> set[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        # The status table's and its rebuild's (the archive tables have indexes of their own).
        found = conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = ? AND sql IS NOT NULL "
                             "AND tbl_name LIKE ?", (kind, f"{MAIN_TABLE}%"))
        return {(name.replace("_rebuild", ""), table) for name, table in found}


def test_every_rebuild_keeps_the_status_tables_indexes(tmp_path: Path) -> None:
    # After a swap SQLite stores the renamed table's name quoted in its indexes' SQL; the
    # second rebuild used to create its indexes on the main table, which the swap then dropped.
    database = Database.parse(f"sqlite:///{tmp_path / 'opledger.db'}")
    migrated_store(database, OrdersApp)
    assert database.path is not None
    migrated, triggers = _indexes(database.path), _indexes(database.path, "trigger")
    assert {table for _, table in migrated} == {MAIN_TABLE} and len(migrated) == 6
    assert {table for _, table in triggers} == {MAIN_TABLE} and len(triggers) == 3  # the counters (ADR 0011)
    view = open_view(database)
    try:
        for position in range(1, 5):
            view.begin_rebuild()
            view.begin_rebuild()  # a leftover from an interrupted rebuild is replaced
            view.finish_rebuild(projection="status", upstream=OrdersApp.name, position=position)
            assert _indexes(database.path) == migrated, f"rebuild {position}"
            assert _indexes(database.path, "trigger") == triggers, f"rebuild {position}"
    finally:
        view.close()
