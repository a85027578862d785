"""The in-memory store driver: the library's POPO recorder, for tests and the simulator
(ADR 0008). There is no query to save here: each method runs the recorder's own methods, and the
conformance suite holds the results to what the SQL drivers return.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any
from uuid import UUID

from migrations.drivers.owned import OwnedStore
from migrations.drivers.protocols import EventRow, OpenIntents, Record


class MemoryDriver(OwnedStore):
    """The driver of a store held by the library's in-memory (POPO) recorder.

    Args:
        recorder: the library's POPO application recorder of the store. A recorder with a
            ``probe_insert()`` method (the simulator's, to inject refusals) has it called by
            :meth:`store_probe`; without one a probe is always accepted.
    """

    name = "memory"

    def __init__(self, recorder: Any) -> None:
        self._recorder = recorder

    def events_list_many(self, ids: Collection[UUID]) -> list[EventRow]:
        """See ``EventLoads.events_list_many``."""
        return [(aggregate_id, stored.originator_version, stored.topic, stored.state)
                for aggregate_id in dict.fromkeys(ids) for stored in self._recorder.select_events(aggregate_id)]

    def records_list_after(self, after: int, limit: int, topics: Sequence[str], ids: dict[Any, UUID], *,
                           prefix: str | None = None) -> list[Record]:
        """See ``LogReads.records_list_after``: the library's own ``select_notifications``."""
        records: list[Record] = []
        if not topics and prefix is None:
            return records  # as ``topic IN ()`` selects nothing
        position = after
        while len(records) < limit:
            # Without a prefix the library filters by topic; with one, every topic is read and
            # filtered here (the library has no prefix filter).
            page = self._recorder.select_notifications(position, limit if prefix is None else max(limit, 100),
                                                       topics=() if prefix is not None else topics,
                                                       inclusive_of_start=False)
            if not page:
                break
            for n in page:
                position = n.id
                if prefix is not None and n.topic not in topics and not n.topic.startswith(prefix):
                    continue
                originator_id = n.originator_id
                if not isinstance(originator_id, UUID):
                    originator_id = ids.get(originator_id) or ids.setdefault(originator_id, UUID(str(originator_id)))
                records.append((n.id, originator_id, n.originator_version, n.topic, n.state))
                if len(records) >= limit:
                    break
            if prefix is None:
                break
        return records

    def intents_list_open(self, after: int, limit: int, topics: Sequence[str], ids: dict[Any, UUID]) -> OpenIntents:
        """See ``LogReads.intents_list_open``: every intent, closed ones included."""
        return OpenIntents(self.records_list_after(after, limit, topics, ids), None)

    def store_probe(self, probe_id: UUID, topic: str, state: bytes) -> None:
        """See ``StoreProbes.store_probe``: nothing to append to; the simulator's recorder may
        refuse through its own ``probe_insert``."""
        probe = getattr(self._recorder, "probe_insert", None)
        if probe is not None:
            probe()

    def _all(self) -> list[Any]:
        return list(self._recorder.select_notifications(0, 2**62, inclusive_of_start=False))

    def topics_count_stored(self, prefix: str, topics: Sequence[str] = ()) -> dict[str, int]:
        """See ``TopicCounts.topics_count_stored``."""
        wanted = set(topics)
        return dict(Counter(n.topic for n in self._all() if n.topic.startswith(prefix) or n.topic in wanted))

    def intents_list_all(self, topics: Sequence[str]) -> list[EventRow]:
        """See ``TopicCounts.intents_list_all``."""
        wanted = set(topics)
        return [(n.originator_id, n.originator_version, n.topic, n.state) for n in self._all() if n.topic in wanted]
