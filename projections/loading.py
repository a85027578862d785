"""Loading many aggregates with one query (DESIGN §11: one query per aggregate cannot keep up).

The library's repository reads one aggregate per query. Workers take operations (and settle
their entities) in batches, so they read every event of a batch of aggregates at once through
the library's own recorder connection and mapper, and fold them exactly as the repository does.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent

from migrations.queries import load_queries

MAX_IDS_PER_QUERY = 500  # keeps SQLite under its bound-parameter limit


def load_aggregates(app: Application, ids: Collection[UUID]) -> dict[UUID, Any]:
    """Return the current state of each aggregate in ``ids`` that exists, by id.

    Args:
        app: the application whose event store holds them (host entities and operations alike).
        ids: aggregate ids; unknown ids are simply absent from the result.

    Raises:
        CorruptRecordError: a stored ledger event cannot be decoded (fails closed).
    """
    recorder: Any = app.recorder
    sqlite = type(recorder).__module__.startswith("eventsourcing.sqlite")
    template = load_queries("sqlite" if sqlite else "postgres")["select_events_of_many"]
    found: dict[UUID, Any] = {}
    wanted = list(dict.fromkeys(ids))
    for start in range(0, len(wanted), MAX_IDS_PER_QUERY):
        chunk = wanted[start:start + MAX_IDS_PER_QUERY]
        if sqlite:
            sql = template.format(table=recorder.events_table_name, ids=",".join("?" * len(chunk)))
            params: Any = [i.hex for i in chunk]
        else:
            sql = template.format(table=f'"{recorder.datastore.schema}"."{recorder.events_table_name}"')
            params = [chunk]
        with recorder.datastore.transaction(commit=False) as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        for row in rows:
            originator_id = recorder.convert_originator_id(row["originator_id"]) if sqlite else row["originator_id"]
            event: Any = app.mapper.to_domain_event(StoredEvent(
                originator_id=originator_id, originator_version=row["originator_version"],
                topic=row["topic"], state=bytes(row["state"])))
            found[originator_id] = event.mutate(found.get(originator_id))
    return found
