"""Reading the store in bulk (DESIGN §11: one query or one object per record cannot keep up).

The library's repository reads one aggregate per query, and its notification reader builds a
``Notification`` per record. Workers take operations (and settle their entities) in batches, and
the status projection reads the log in stretches of thousands, so both read plain rows through
the library's own recorder connection and decode them with the application's mapper
(``LedgerMapper.decode_record``): the same rules and errors as the library's path, with fewer
objects per record. Over the library's in-memory (POPO) recorder, used by tests and the
simulator, there is no query to save: both read through the recorder's own methods and decode
with the same decoder.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent
from eventsourcing.popo import POPOAggregateRecorder, POPOApplicationRecorder
from eventsourcing.utils import TopicError

from ledger.codec import LEDGER_TOPIC_PREFIX, LedgerMapper
from ledger.errors import CorruptRecordError, UnreadableEventError
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
    if isinstance(recorder, POPOAggregateRecorder):
        return _load_from_memory(app, ids)
    sqlite = _is_sqlite(recorder)
    template = load_queries("sqlite" if sqlite else "postgres")["select_events_of_many"]
    found: dict[UUID, Any] = {}
    wanted = list(dict.fromkeys(ids))
    for start in range(0, len(wanted), MAX_IDS_PER_QUERY):
        chunk = wanted[start:start + MAX_IDS_PER_QUERY]
        if sqlite:
            sql = template.format(table=recorder.events_table_name, ids=",".join("?" * len(chunk)))
            with recorder.datastore.transaction(commit=False) as cursor:
                cursor.execute(sql, [i.hex for i in chunk])
                rows = cursor.fetchall()
        else:
            sql = template.format(table=f'"{recorder.datastore.schema}"."{recorder.events_table_name}"')
            with recorder.datastore.get_connection() as conn, conn.cursor(binary=True) as cursor:
                cursor.execute(sql, [chunk])  # binary results: see ``select_records``
                rows = cursor.fetchall()
        decode = record_decoder(app)
        for row in rows:
            originator_id = recorder.convert_originator_id(row["originator_id"]) if sqlite else row["originator_id"]
            event: Any = decode(originator_id, row["originator_version"], row["topic"], bytes(row["state"]))
            found[originator_id] = event.mutate(found.get(originator_id))
    return found


def record_decoder(app: Application) -> Callable[[Any, int, str, bytes], Any]:
    """Return the application's mapper as a function of a record's columns
    ``(originator_id, originator_version, topic, state) -> domain event``.

    ``LedgerMapper.decode_record`` where the mapper is a ``LedgerMapper`` that keeps its own
    ``to_domain_event``; otherwise (a host's own mapper, or one that overrides
    ``to_domain_event``) the mapper's ``to_domain_event`` of a ``StoredEvent``, so such a mapper
    keeps working, one object slower per record. Either way a ledger record that does not
    decode raises ``CorruptRecordError``, which readers quarantine (one operation, not the log);
    one whose ``ledger.`` topic does not resolve raises its subclass ``UnreadableEventError``.
    """
    mapper: Any = app.mapper
    if isinstance(mapper, LedgerMapper) and type(mapper).to_domain_event is LedgerMapper.to_domain_event:
        return mapper.decode_record

    def via_stored_event(originator_id: Any, originator_version: int, topic: str, state: bytes) -> Any:
        try:
            return mapper.to_domain_event(StoredEvent(originator_id=originator_id,
                                                      originator_version=originator_version, topic=topic, state=state))
        except CorruptRecordError:
            raise
        except Exception as exc:  # noqa: BLE001 - any mapper's failure on a ledger record
            if not topic.startswith(LEDGER_TOPIC_PREFIX):
                raise
            error = UnreadableEventError if isinstance(exc, TopicError) else CorruptRecordError
            raise error(originator_id, originator_version, topic, str(exc) or type(exc).__name__) from exc

    return via_stored_event


def select_records(app: Application, after: int, limit: int, topics: Sequence[str],
                   ids: dict[Any, UUID], *, prefix: str | None = None) -> list[tuple[int, UUID, int, str, bytes]]:
    """Return up to ``limit`` records of the notification log after position ``after``, of the
    given topics only (and those starting with ``prefix``), in log order, as ``(position,
    originator_id, originator_version, topic, state)`` tuples (decode each with
    :func:`record_decoder`).

    The rows the library's ``select_notifications`` reads, without a ``Notification`` object per
    row (measured over a log of 100k records, three runs each: 5.9-6.5 against 12.7-16.1 µs a
    record on SQLite, 7.6-8.7 against 17.6-18.0 µs on PostgreSQL; docs/performance.md).

    Args:
        app: the application whose log is read.
        after: the last position already read (0 for the start of the log).
        limit: how many records at most.
        topics: the event topics wanted.
        prefix: also every topic starting with it (``ledger.``: records of event types this
            code does not know, so the reader can report them); None for none.
        ids: a memo of originator ids by their stored form, shared across calls by the caller:
            SQLite stores ids as text, and an operation's records share one ``UUID`` object
            instead of parsing the text of each.
    """
    recorder: Any = app.recorder
    if isinstance(recorder, POPOApplicationRecorder):
        return _select_from_memory(recorder, after, limit, topics, ids)
    if _is_sqlite(recorder):
        sql = load_queries("sqlite")["select_records"].format(
            table=recorder.events_table_name, topics=",".join("?" * len(topics)))
        with recorder.datastore.transaction(commit=False) as cursor:
            cursor.sqlite_cursor.row_factory = None  # plain tuples
            cursor.execute(sql, [after, *topics, prefix, limit])
            rows = cursor.fetchall()
        records = []
        for position, text_id, version, topic, state in rows:
            originator_id = ids.get(text_id)
            if originator_id is None:
                originator_id = ids[text_id] = recorder.convert_originator_id(text_id)
            records.append((position, originator_id, version, topic, state))
        return records
    return _postgres_records(recorder, "select_records", [after, list(topics), prefix, limit])


def select_open_intents(app: Application, after: int, limit: int, topics: Sequence[str],
                        ids: dict[Any, UUID]) -> OpenIntents:
    """:func:`select_records` for intents (``topics``: the ``Intended`` topics), leaving out on
    PostgreSQL those whose operation recorded anything after them already. Workers of many
    processes share that log, and a worker reading its tail would otherwise load each intent
    another worker claimed only to find it held (two workers end to end: one load of a claimed
    intent for every two claims; docs/performance.md). One process owns the other backends'
    stores, so there it is :func:`select_records`.

    Returns:
        :class:`OpenIntents`: the records as ``(position, originator_id, originator_version,
        topic, state)`` tuples in log order, and how far the read saw every other intent closed.
    """
    recorder: Any = app.recorder
    if isinstance(recorder, POPOApplicationRecorder) or _is_sqlite(recorder):
        return OpenIntents(select_records(app, after, limit, topics, ids), None)
    return open_intents(_postgres_records(recorder, "select_open_intents", [after, list(topics), limit, False]), limit)


def open_intents(rows: list[Any], limit: int, elsewhere: frozenset[UUID] = frozenset()) -> OpenIntents:
    """The :class:`OpenIntents` of the rows of ``select_open_intents.sql`` read with ``limit``
    (its last column, whether the read reserved each, is the caller's)."""
    records = [tuple(row[1:6]) for row in rows if row[1] is not None]
    if len(records) >= limit:
        return OpenIntents(records, records[-1][0], elsewhere)
    return OpenIntents(records, rows[0][0] if rows else None, elsewhere)


class OpenIntents(NamedTuple):
    """What :func:`select_open_intents` read.

    Attributes:
        records: ``(position, originator_id, originator_version, topic, state)`` tuples.
        closed_through: a log position (or None where not known: SQLite and the in-memory store,
            whose records include closed intents): every intent after the read's start and up to
            it that is not in ``records`` had a later event of its operation when read, and so
            is closed for good (positions are in commit order: ``select_open_intents.sql``).
        elsewhere: the operations of ``records`` another worker had reserved
            (``projections.reservations``); empty for a read that reserves nothing.
    """

    records: list[tuple[int, UUID, int, str, bytes]]
    closed_through: int | None
    elsewhere: frozenset[UUID] = frozenset()


def intents_are_open(app: Application) -> bool:
    """Whether :func:`select_open_intents` returns only intents their operation recorded nothing
    after (PostgreSQL): each such record is then the operation's whole history when read."""
    recorder: Any = app.recorder
    return not (isinstance(recorder, POPOApplicationRecorder) or _is_sqlite(recorder))


def _postgres_records(recorder: Any, query: str, params: list[Any]) -> list[Any]:
    """Run the PostgreSQL log query named ``query`` on the recorder's events table, prepared.
    Binary results: states arrive as bytes and ids as UUIDs without the text protocol's hex and
    text parsing (1.6-2.0 against 2.8-4.0 µs a record over the 100k log, three runs)."""
    from psycopg.rows import tuple_row

    sql = load_queries("postgres")[query].format(
        table=f'"{recorder.datastore.schema}"."{recorder.events_table_name}"')
    with recorder.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row, binary=True) as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchall()


def _load_from_memory(app: Application, ids: Collection[UUID]) -> dict[UUID, Any]:
    # The in-memory (POPO) recorder: its own select_events, folded as the SQL path folds.
    decode = record_decoder(app)
    found: dict[UUID, Any] = {}
    for aggregate_id in dict.fromkeys(ids):
        for stored in app.recorder.select_events(aggregate_id):
            event: Any = decode(stored.originator_id, stored.originator_version, stored.topic, stored.state)
            found[aggregate_id] = event.mutate(found.get(aggregate_id))
    return found


def _select_from_memory(recorder: POPOApplicationRecorder, after: int, limit: int, topics: Sequence[str],
                        ids: dict[Any, UUID]) -> list[tuple[int, UUID, int, str, bytes]]:
    # The in-memory (POPO) recorder: the library's own select_notifications.
    records = []
    for n in recorder.select_notifications(after, limit, topics=topics, inclusive_of_start=False):
        originator_id = n.originator_id
        if not isinstance(originator_id, UUID):
            originator_id = ids.get(originator_id) or ids.setdefault(originator_id, UUID(str(originator_id)))
        records.append((n.id, originator_id, n.originator_version, n.topic, n.state))
    return records


def stored_ledger_topics(app: Application, topics: Sequence[str] = ()) -> dict[str, int]:
    """Return the distinct stored topics that start with ``ledger.`` or are among ``topics``,
    with how many records each has.

    Reads the whole events table (there is no index on topic): for checks at start, never per
    cycle.

    Args:
        app: the application whose events table is read.
        topics: more topics to count (registered old topics of renamed ledger classes).

    Source: issue 10 item 5 (``migrate`` and the worker's start count unresolvable topics).
    """
    recorder: Any = app.recorder
    wanted = list(dict.fromkeys(topics))
    if _is_sqlite(recorder):
        sql = load_queries("sqlite")["stored_ledger_topics"].format(
            table=recorder.events_table_name, topics=",".join("?" * len(wanted)))
        with recorder.datastore.transaction(commit=False) as cursor:
            cursor.execute(sql, [LEDGER_TOPIC_PREFIX, *wanted])
            return {str(row[0]): int(row[1]) for row in cursor.fetchall()}
    sql = load_queries("postgres")["stored_ledger_topics"].format(
        table=f'"{recorder.datastore.schema}"."{recorder.events_table_name}"')
    from psycopg.rows import tuple_row

    with recorder.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as cursor:
        cursor.execute(sql, [LEDGER_TOPIC_PREFIX, wanted])
        return {str(topic): int(count) for topic, count in cursor.fetchall()}


def _is_sqlite(recorder: Any) -> bool:
    return type(recorder).__module__.startswith("eventsourcing.sqlite")
