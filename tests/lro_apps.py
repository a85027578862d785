"""A host application for the accepted-work tests: long-running operations on the ``lro``
adapter (``adapters.lro``) against the reference partner's mock provider, with short polls.

Importable by worker processes as ``tests.lro_apps:LroApp``.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ledger.application import LedgerApplication
from ledger.declarations import DeliveryMode, Integration
from tests.apps import Thing, declaration

ACCEPTED_DEADLINE_SECONDS = 60.0
SHORT_ACCEPTED_DEADLINE_SECONDS = 1.5
"""The accepted deadline of ``test.lro_short``: passed while the provider still runs."""
POLLING: dict[str, Any] = {"initial_delay_seconds": 0.05, "max_interval_seconds": 0.2,
                           "overdue_interval_seconds": 0.3, "limit_seconds": 120.0}


def lro_declaration(name: str = "test.lro", accepted: float = ACCEPTED_DEADLINE_SECONDS) -> Integration:
    """An idempotent integration on the ``lro`` adapter with fast polling."""
    return declaration(DeliveryMode.IDEMPOTENT, name=name, adapter="lro", polling=POLLING,
                       request_timeout_seconds=2.0,
                       deadlines={"pending": 300, "claimed": 60, "dispatching": 60, "accepted": accepted})


class LroApp(LedgerApplication):
    """Two LRO integrations: ``test.lro`` (accepted deadline 60 s) and ``test.lro_short`` (1.5 s);
    and ``test.lro_callback``, a webhook in ``callback`` mode (its adapter cannot poll or cancel)."""

    name = "lros"
    integrations = [lro_declaration(), lro_declaration("test.lro_short", SHORT_ACCEPTED_DEADLINE_SECONDS),
                    declaration(DeliveryMode.CALLBACK, name="test.lro_callback", polling=POLLING)]

    def make(self, target: str, *, n: int = 0, integration: str = "test.lro") -> UUID:
        """Create a Thing and intend one long-running operation for it, co-committed."""
        thing = Thing(label=f"thing-{n}")
        op = self.intend(thing, integration, target=target,
                         payload={"n": n, "note": "internal note", "token": "secretref:test-token"})
        self.save(thing, op)
        return op.id
