"""The simulated host: one entity type, one integration per delivery mode, settlement faults.

The entity's settlement action appends the result it is given; the simulation can make it
raise a number of times first (``SettlementFaults``), as a host's buggy or briefly failing
settlement method would. Entity ids derive from the run's seed and the entity's number, so a
seed names the same operations every time.

Source: issue 11 (the simulator); DESIGN §6 (settlement).
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from adapters.simulation.budgets import GLOBAL_BUDGET, budgets_of, tenant_of
from ledger.adapter_names import register_adapter
from ledger.application import LedgerApplication
from ledger.declarations import DeliveryMode, Integration
from ledger.settlement import SettlementOutcome, SettlementRequest, default_settlement_policy
from migrations.drivers import memory_env

ADAPTER = register_adapter("sim")
"""The adapter name the simulated integrations declare (registered: not one ``opledger worker`` builds)."""
TARGET = "https://provider.sim/effects"
MAX_ATTEMPTS = 3
LEASE_SECONDS = 10.0
"""The simulated workers' lease, seconds of simulated time."""
NAMESPACE = UUID("5f0c8a9e-3b0d-4c8e-9a57-0d6f2b1c7e11")
MODES = tuple(DeliveryMode)


def integration_name(mode: DeliveryMode) -> str:
    """The simulated integration of ``mode``."""
    return f"sim.{mode.value}"


LRO_INTEGRATION = "sim.lro"
"""The simulated long-running-operation integration (``adapters.simulation.lro``)."""
LRO_ADAPTER = register_adapter("sim_lro")


def _declaration(mode: DeliveryMode, name: str | None = None, adapter: str = ADAPTER) -> Integration:
    return Integration.parse({
        "name": name or integration_name(mode),
        "version": 1,
        "adapter": adapter,
        "delivery_mode": mode.value,
        "request_timeout_seconds": 2.0,
        "retry": {"max_attempts": MAX_ATTEMPTS, "base_backoff_seconds": 0.5, "max_backoff_seconds": 4.0,
                  "jitter": 0.2},
        "deadlines": {"pending": 600, "claimed": 60, "dispatching": 60, "accepted": 120},
        # Past the accepted deadline an operation is remote_unknown and followed until this
        # limit, then ambiguous: within the drain (run.DRAIN_LIMIT_SECONDS).
        "polling": {"initial_delay_seconds": 1.0, "max_interval_seconds": 8.0, "overdue_interval_seconds": 30.0,
                    "limit_seconds": 600.0},
        "settlement": {"entity_type": f"{__name__}:Account", "method": "on_result", "max_attempts": 3,
                       "backoff_seconds": 1.0},
        "payload": {"n": "public"},
        # A budgets block must limit something; the unbudgeted modes leave it out.
        **({"budgets": budgets_of(mode)} if budgets_of(mode) else {}),
    })


class SettlementFaults:
    """How many more times each entity's settlement action raises (set by the simulation).

    Class-level, because the entity's method has no other way to reach the run; a run resets it
    (:meth:`reset`) before it starts, and runs in one process are sequential.
    """

    remaining: ClassVar[dict[UUID, int]] = {}

    @classmethod
    def reset(cls) -> None:
        """Forget every fault (a new run starts)."""
        cls.remaining = {}


DENY_ONE_IN = 8
"""The simulated host's authorization denies settling one account in this many (by its id)."""


def settlement_denied(entity_id: UUID) -> bool:
    """Whether the simulated host's authorization denies settling into account ``entity_id``:
    the ground truth the oracle checks settlements against (``settlement_governed``). Derived
    from the id (itself from the run's seed), so no random draw of the run changes."""
    return entity_id.int % DENY_ONE_IN == 0


def sim_settlement_policy(request: SettlementRequest) -> str | None:
    """The simulated host's settlement policy: the default rule, then its authorization
    (:func:`settlement_denied`)."""
    refused = default_settlement_policy(request)
    if refused is None and settlement_denied(request.operation.source.entity_id):
        refused = f"simulated: the host's authorization denies settling account {request.entity.name}"
    return refused


class SettlementFaultError(RuntimeError):
    """A simulated failure of the host's settlement method (retried by the settlement service)."""


class Account(Aggregate):
    """The source entity; its settlement action records each result it is handed."""

    @staticmethod
    def create_id(name: str) -> UUID:
        return uuid.uuid5(NAMESPACE, name)

    @event("Opened")
    def __init__(self, name: str) -> None:
        self.name = name
        self.results: list[str] = []

    def on_result(self, outcome: SettlementOutcome) -> None:
        """Settlement action: record ``outcome.result``, unless a simulated fault raises first.

        Raises:
            SettlementFaultError: while ``SettlementFaults`` holds faults for this entity.
        """
        left = SettlementFaults.remaining.get(self.id, 0)
        if left > 0:
            SettlementFaults.remaining[self.id] = left - 1
            raise SettlementFaultError(f"simulated settlement failure ({left} left)")
        self._settled(outcome.result)

    @event("Settled")
    def _settled(self, result: str) -> None:
        self.results.append(result)


class SimApp(LedgerApplication):
    """The simulated host application (in memory: the library's POPO recorder)."""

    name = "sim"
    integrations: ClassVar[list[Integration]] = [
        *(_declaration(mode) for mode in MODES),
        _declaration(DeliveryMode.IDEMPOTENT, LRO_INTEGRATION, LRO_ADAPTER),
    ]
    global_call_budget = GLOBAL_BUDGET

    def open_account(self, seed: int, number: int, mode: DeliveryMode | None) -> tuple[Account, UUID]:
        """Create account ``number`` of run ``seed`` and intend one operation of ``mode`` for it
        (None: a long-running operation of ``sim.lro``), co-committed. Returns the account and
        the operation id."""
        account = Account(name=f"{seed}-{number}")
        name = integration_name(mode) if mode is not None else LRO_INTEGRATION
        op = self.intend(account, name, target=TARGET, payload={"n": number}, tenant=tenant_of(number))
        self.save(account, op)
        return account, op.id


POPO: dict[str, Any] = memory_env()
"""The library environment of the simulator's in-memory store."""
