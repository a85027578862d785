"""The benchmark's host application: one entity type, one instant integration, one HTTP one.

Worker processes find it as ``OPLEDGER_APP=bench.app:BenchApp`` with the repository root on
``PYTHONPATH``. ``bench.noop`` uses the runtime's ``fake`` adapter (``adapters.fake.FakeAdapter``:
instant, always ``Succeeded``); ``bench.http`` uses the webhook adapter against the reference
partner on loopback. Both are idempotent and settle into a trivial entity action.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from ledger.application import LedgerApplication
from ledger.declarations import Integration
from ledger.identity import Source
from ledger.operation import Operation
from ledger.settlement import SettlementOutcome

APP_TOPIC = "bench.app:BenchApp"
NOOP = "bench.noop"
HTTP = "bench.http"

_COMMON: dict[str, Any] = {
    "version": 1,
    "delivery_mode": "idempotent",
    "request_timeout_seconds": 5.0,
    "retry": {"max_attempts": 5, "base_backoff_seconds": 0.1, "max_backoff_seconds": 1.0, "jitter": 0.1},
    "deadlines": {"pending": 3600, "claimed": 600, "dispatching": 600, "accepted": 600},
    "settlement": {"entity_type": "bench.app:Item", "method": "on_result", "max_attempts": 3,
                   "backoff_seconds": 0.1},
    "payload": {"n": "public"},
}
INTEGRATIONS = [
    Integration.parse({**_COMMON, "name": NOOP, "adapter": "fake"}),
    Integration.parse({**_COMMON, "name": HTTP, "adapter": "webhook"}),
]


class Item(Aggregate):
    """The source entity: created (the transition that authorizes an operation), then settled."""

    @event("Created")
    def __init__(self, n: int) -> None:
        self.n = n
        self.result: str | None = None

    def on_result(self, outcome: SettlementOutcome) -> None:
        """Settlement action of both integrations."""
        self._settled(outcome.result)

    @event("Settled")
    def _settled(self, result: str) -> None:
        self.result = result


class BenchApp(LedgerApplication):
    """The benchmark host application (tables are named ``bench_*`` on PostgreSQL)."""

    name = "bench"
    integrations = INTEGRATIONS

    def create_alone(self, n: int) -> UUID:
        """The baseline transition: create an item, save it alone (one event, one transaction)."""
        item = Item(n=n)
        self.save(item)
        return item.id

    def create_with_intent(self, n: int, *, integration: str = NOOP, target: str | None = None) -> UUID:
        """The same transition co-committed with its intent through the public API
        (``intend`` + ``save``: two events, one transaction). Returns the operation id."""
        item = Item(n=n)
        op = self.intend(item, integration, target=target, payload={"n": n})
        self.save(item, op)
        return op.id

    def create_with_intent_unchecked(self, n: int, *, integration: str = NOOP, now: datetime | None = None) -> UUID:
        """Diagnostic: like :meth:`create_with_intent` but builds the ``Intended`` directly with
        ``Operation.intend``, skipping ``LedgerApplication.intend``'s lookup of an existing
        operation (one read per intent). Isolates the lookup's cost."""
        item = Item(n=n)
        op = self.new_operation(item, n, integration=integration, now=now)
        self.save(item, op)
        return op.id

    def new_operation(self, item: Item, n: int, *, integration: str = NOOP, target: str | None = None,
                      now: datetime | None = None) -> Operation:
        """The intent ``item``'s pending transition authorizes, built without a store lookup
        (bulk seeding: the item is new, so no operation can exist for it yet)."""
        declaration = self.registry.get(integration)
        source = Source(tenant=self.tenant, entity_type="bench.app:Item", entity_id=item.id,
                        entity_version=item.version, effect_index=0)
        return Operation.intend(now=now or self.clock.now(), integration=declaration, source=source,
                                payload={"n": n}, target=target)

    def seed(self, start: int, count: int, *, integration: str = NOOP, target: str | None = None,
             now: datetime | None = None) -> list[UUID]:
        """Bulk-commit ``count`` items with their intents in one ``save()`` (benchmark setup only:
        real hosts commit one transition per transaction). Returns the operation ids."""
        aggregates: list[Aggregate] = []
        ids: list[UUID] = []
        for n in range(start, start + count):
            item = Item(n=n)
            op = self.new_operation(item, n, integration=integration, target=target, now=now)
            aggregates += [item, op]
            ids.append(op.id)
        self.save(*aggregates)
        return ids


def entity_topics() -> Sequence[str]:
    """Topics of the host's own events (for counting the whole log)."""
    from eventsourcing.utils import get_topic

    return (get_topic(Item.Created), get_topic(Item.Settled))
