"""Folding an aggregate's events into its state, for every aggregate the application loads.

The library's default projector, ``eventsourcing.application.project_aggregate``, asserts
``isinstance(event, CanMutateProtocol)`` for each event before calling its ``mutate``. That is a
check against a runtime-checkable ``Protocol``, which Python 3.11 answers by walking the protocol's
attributes on every call: about 35 µs an event, a tenth of the simulator's time in a profile
(89,861 checks in one test) and a share of every ``repository.get`` in a worker. Every event the
application stores is an ``Aggregate.Event``, which has ``mutate``; one that had not would fail as
it does now, with ``AttributeError`` for ``AssertionError``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eventsourcing.application import Repository


def project_events(aggregate: Any, events: Iterable[Any]) -> Any:
    """Fold ``events`` (oldest first) into ``aggregate`` (None before the first), each by its own
    ``mutate``; return the result (None when an event discarded the aggregate).

    Raises:
        AttributeError: an event without ``mutate`` (not an eventsourcing aggregate event).
    """
    for event in events:
        aggregate = event.mutate(aggregate)
    return aggregate


class LedgerRepository(Repository[Any]):
    """The library's repository, reconstructing with :func:`project_events` unless a caller
    passes its own ``projector_func``."""

    def get(self, aggregate_id: Any, *, version: int | None = None, projector_func: Any = project_events,
            fastforward_skipping: bool = False, deepcopy_from_cache: bool = True) -> Any:
        """See ``eventsourcing.application.Repository.get``; only the default projector differs."""
        return super().get(aggregate_id, version=version, projector_func=projector_func,
                           fastforward_skipping=fastforward_skipping, deepcopy_from_cache=deepcopy_from_cache)
