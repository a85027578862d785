"""Host applications for governed settlement (issue 32): an integration that settles into
``tests.apps:Thing``, an unrelated aggregate with a method of the same name, and the same
declaration changed to settle into that aggregate (as a redeploy between intent and settlement
would change it).

Importable as ``tests.governed``.
"""

from __future__ import annotations

from typing import ClassVar
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from ledger.application import LedgerApplication
from ledger.declarations import DeliveryMode, Integration
from ledger.intents import Delegation
from ledger.settlement import SettlementOutcome
from tests.apps import Thing, declaration

INTEGRATION = "test.governed"
TARGET = "https://partner.test/call"
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Stranger(Aggregate):
    """Not the declared entity, though it has a method of the declared name."""

    @event("Met")
    def __init__(self, label: str) -> None:
        self.label = label
        self.results: list[str] = []

    def on_result(self, outcome: SettlementOutcome) -> None:
        self._settled(outcome.result)

    @event("Settled")
    def _settled(self, result: str) -> None:
        self.results.append(result)


class Witness(Aggregate):
    """A source entity whose settlement action keeps every ``SettlementOutcome`` it is handed
    (in memory, per process: for tests of what the action receives)."""

    seen: ClassVar[list[SettlementOutcome]] = []

    @event("Opened")
    def __init__(self, label: str) -> None:
        self.label = label
        self.results: list[str] = []

    def on_result(self, outcome: SettlementOutcome) -> None:
        Witness.seen.append(outcome)
        self._settled(outcome.result)

    @event("Settled")
    def _settled(self, result: str) -> None:
        self.results.append(result)


def governed(entity_type: str = "tests.apps:Thing", name: str = INTEGRATION) -> Integration:
    """The governed integration (fake adapter, idempotent), settling into ``entity_type``."""
    return declaration(DeliveryMode.IDEMPOTENT, name=name, adapter="fake",
                       settlement={"entity_type": entity_type, "method": "on_result", "max_attempts": 3,
                                   "backoff_seconds": 0.05})


class GovernedApp(LedgerApplication):
    """Settles ``test.governed`` into ``Thing`` and ``test.witnessed`` into ``Witness``."""

    name = "governed"
    integrations: ClassVar[list[Integration]] = [governed(), governed("tests.governed:Witness", "test.witnessed")]

    def make(self, label: str = "t") -> tuple[UUID, UUID]:
        """A Thing and its operation, co-committed: ``(operation id, thing id)``."""
        thing = Thing(label=label)
        op = self.intend(thing, INTEGRATION, target=TARGET, payload={"n": 1})
        self.save(thing, op)
        return op.id, thing.id

    def witness(self, label: str = "w") -> tuple[UUID, UUID]:
        """A Witness and its operation, intended by ``clerk:7`` on behalf of ``customer:42``
        (a customer) with a trace: ``(operation id, witness id)``."""
        entity = Witness(label=label)
        op = self.intend(entity, "test.witnessed", target=TARGET, payload={"n": 2}, principal="clerk:7",
                         traceparent=TRACE, code_digest="sha256:host-module",
                         on_behalf_of=[Delegation("customer:42", "customer")])
        self.save(entity, op)
        return op.id, entity.id


class ChangedApp(GovernedApp):
    """The same store and integration (name and version), redeclared to settle into
    ``Stranger``: what a worker deployed with a changed declaration loads."""

    name = "governed"
    integrations: ClassVar[list[Integration]] = [governed("tests.governed:Stranger"),
                                                 governed("tests.governed:Witness", "test.witnessed")]
