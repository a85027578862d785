"""``StatusView.reserve``: concurrent workers of one store pick disjoint operations."""

from __future__ import annotations

from uuid import uuid4

from ledger.config import Database
from projections.view import open_view


def test_two_reservations_never_share_an_operation_and_end_with_the_context(migrated: Database) -> None:
    ids = [uuid4() for _ in range(50)]
    first, second = open_view(migrated), open_view(migrated)
    try:
        with first.reserve(ids[:30]) as mine:
            assert mine == set(ids[:30])
            with second.reserve(ids) as theirs:
                if migrated.backend == "postgres":
                    assert theirs == set(ids[30:]), "a reserved operation was handed to a second worker"
                else:
                    assert theirs == set(ids)  # one owner per SQLite store: nothing to avoid
        with second.reserve(ids) as after:
            assert after == set(ids), "reservations outlived their context"
    finally:
        first.close()
        second.close()
