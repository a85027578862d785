"""Reading the store in bulk (DESIGN §11: one query or one object per record cannot keep up).

The library's repository reads one aggregate per query, and its notification reader builds a
``Notification`` per record. Workers take operations (and settle their entities) in batches, and
the status projection reads the log in stretches of thousands, so both read plain rows through
the store's driver (``migrations.drivers``: the SQL drivers on the library's own recorder
connection, the in-memory one through the recorder's own methods) and decode them here with the
application's mapper (``LedgerMapper.decode_record``): the same rules and errors as the
library's path, with fewer objects per record, one decoding path for every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import TopicError

from ledger.codec import LEDGER_TOPIC_PREFIX, LedgerMapper
from ledger.errors import CorruptRecordError, UnreadableEventError
from migrations.drivers import driver_of


def load_aggregates(app: Application, ids: Collection[UUID]) -> dict[UUID, Any]:
    """Return the current state of each aggregate in ``ids`` that exists, by id.

    Args:
        app: the application whose event store holds them (host entities and operations alike).
        ids: aggregate ids; unknown ids are simply absent from the result.

    Raises:
        CorruptRecordError: a stored ledger event cannot be decoded (fails closed).
    """
    decode = record_decoder(app)
    found: dict[UUID, Any] = {}
    for originator_id, version, topic, state in driver_of(app).events_list_many(ids):
        event: Any = decode(originator_id, version, topic, state)
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


def stored_ledger_topics(app: Application, topics: Collection[str] = ()) -> dict[str, int]:
    """Return the distinct stored topics that start with ``ledger.`` or are among ``topics``,
    with how many records each has.

    Reads the whole events table (there is no index on topic): for checks at start, never per
    cycle.

    Args:
        app: the application whose events table is read.
        topics: more topics to count (registered old topics of renamed ledger classes).

    Source: issue 10 item 5 (``migrate`` and the worker's start count unresolvable topics).
    """
    return driver_of(app).topics_count_stored(LEDGER_TOPIC_PREFIX, list(topics))
