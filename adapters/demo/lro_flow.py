"""The demo's long-running-operation flow: provisioning workspaces on the partner's mock LRO
provider (``adapters.partner.lro``) through the ``lro`` adapter.

Each workspace's creation co-commits one ``provisioning.create`` intent. The partner's script for
each (in the create URL) makes some succeed after a few polls (one of them answering with
``Retry-After``, one still running when the first worker is killed), one fail, and one run until
the demo cancels it mid-flight. The demo (``adapters.demo.run``) calls :func:`place` with the
orders, :func:`cancel_mid_flight` between the two workers (the SQLite store is free then), and
:func:`summary` at the end, which checks the ledger against the partner's log: one create call
applied per operation, and every recorded outcome matching the provider's own state;
:func:`resumed_by_another_worker` shows from the ledger which operations the first worker was
polling when it was killed, and the second took over.

Source: issue 12 item 6; docs/adr/0004-accepted-work.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from adapters.partner import PartnerLog
from ledger.application import LedgerApplication
from ledger.clock import SystemClock
from ledger.config import Database
from ledger.declarations import DeliveryMode, Integration
from ledger.operation import Operation
from ledger.settlement import SettlementOutcome
from migrations.drivers import database_driver
from projections.rows import StatusRow

PROVISIONING = Integration.parse({
    "name": "provisioning.create",
    "version": 1,
    "adapter": "lro",
    "delivery_mode": "idempotent",
    "request_timeout_seconds": 2.0,
    "retry": {"max_attempts": 5, "base_backoff_seconds": 0.2, "max_backoff_seconds": 2.0, "jitter": 0.2},
    "deadlines": {"pending": 600, "claimed": 60, "dispatching": 120, "accepted": 60},
    "polling": {"initial_delay_seconds": 0.1, "max_interval_seconds": 0.5, "overdue_interval_seconds": 2.0,
                "limit_seconds": 600.0},
    "settlement": {"entity_type": "adapters.demo.lro_flow:Workspace", "method": "on_provisioned",
                   "max_attempts": 5, "backoff_seconds": 0.2},
    "payload": {"workspace_id": "public", "plan": "public"},
})

POLL_LEASE_SECONDS = 2.0
"""The demo workers' poll lease: the second worker resumes the first one's polls this soon."""


@dataclass(frozen=True)
class Provisioning:
    """One workspace of the flow: its partner script and the outcome the provider will reach."""

    label: str
    script: str
    expected: str  # the provider's final state: succeeded, failed or cancelled


FLOW = (
    Provisioning("ws-quick", "polls=3", "succeeded"),
    Provisioning("ws-throttled", "polls=3&retry_after=1", "succeeded"),
    Provisioning("ws-long", "polls=0&after=5", "succeeded"),  # still running when worker 1 dies
    Provisioning("ws-broken", "polls=2&result=failure", "failed"),
    Provisioning("ws-cancelled", "polls=100000", "cancelled"),  # runs until the demo cancels it
)
CANCELLED_LABEL = "ws-cancelled"


class Workspace(Aggregate):
    """A workspace; its settlement action records how provisioning ended."""

    @event("Requested")
    def __init__(self, label: str, plan: str = "team") -> None:
        self.label = label
        self.plan = plan
        self.provisioning: str | None = None

    def on_provisioned(self, outcome: SettlementOutcome) -> None:
        """Settlement action for ``provisioning.create``."""
        self._provisioned(str(outcome.operation_id), outcome.result)

    @event("Provisioned")
    def _provisioned(self, operation_id: str, result: str) -> None:
        self.provisioning = result


def provision(app: LedgerApplication, label: str, url: str) -> UUID:
    """Request workspace ``label``: its ``Requested`` event and the provisioning intent commit in
    one transaction. Returns the operation id."""
    workspace = Workspace(label=label)
    op = app.intend(workspace, PROVISIONING.name, target=url, principal="demo",
                    payload={"workspace_id": str(workspace.id), "plan": workspace.plan})
    app.save(workspace, op)
    return op.id


def place(app: LedgerApplication, partner_url: str) -> dict[UUID, Provisioning]:
    """Start the flow: one provisioning intent per :data:`FLOW` entry. Returns them by operation id."""
    return {provision(app, p.label, f"{partner_url}/lro/workspaces?{p.script}"): p for p in FLOW}


def modes(flow: dict[UUID, Provisioning]) -> dict[UUID, str]:
    """The delivery mode of each operation of the flow (for the demo's duplicate check)."""
    return dict.fromkeys(flow, DeliveryMode(PROVISIONING.delivery_mode).value)


def mid_flight(log: PartnerLog, flow: dict[UUID, Provisioning]) -> bool:
    """Whether the workspace to be cancelled is running at the provider and being polled."""
    op_id = next(str(i) for i, p in flow.items() if p.label == CANCELLED_LABEL)
    return any(r.kind == "poll" for r in log.requests(op_id))


def cancel_mid_flight(database: Database, app_class: type[LedgerApplication],
                      flow: dict[UUID, Provisioning]) -> str:
    """Request cancellation of the flow's long-running workspace (no worker owns the store now).

    Returns:
        The state it was in when the cancel was recorded.
    """
    op_id = next(i for i, p in flow.items() if p.label == CANCELLED_LABEL)
    app = app_class(env=database.library_env(create_table=False))
    try:
        op = app.get_operation(op_id)
        op.request_cancel(now=SystemClock().now(), principal="demo", reason="customer changed plan")
        app.save(op)
        return op.execution.value
    finally:
        app.close()


def summary(flow: dict[UUID, Provisioning], rows: dict[UUID, StatusRow], log: PartnerLog) -> dict[str, Any]:
    """The flow's part of the demo summary, checked against the partner's log.

    Returns:
        ``operations``, ``outcomes`` (operation label -> recorded outcome), ``provider``
        (label -> the provider's final state), ``mismatches`` (labels whose recorded outcome
        differs from the provider's state), ``creates_applied`` (create calls the provider
        applied, one per operation), ``polls`` and ``cancel_requests`` the provider answered.
    """
    provider = {o["idempotency_key"]: o for o in log.lro_operations()}
    outcomes: dict[str, str] = {}
    states: dict[str, str] = {}
    mismatches = []
    for op_id, plan in flow.items():
        row = rows.get(op_id)
        outcome = row.execution if row is not None else "missing"
        state = str(provider.get(str(op_id), {}).get("state", "never created"))
        outcomes[plan.label], states[plan.label] = outcome, state
        # Honest either way: the ledger's outcome is the provider's state, or the cancel came
        # before the create call and nothing was ever sent.
        if outcome != state and not (outcome == "cancelled" and state == "never created"):
            mismatches.append(plan.label)
    keys = {str(i) for i in flow}
    return {
        "operations": len(flow),
        "outcomes": outcomes,
        "provider": states,
        "mismatches": mismatches,
        "creates_applied": sum(log.applied_count(k) for k in keys),
        "polls": sum(int(str(provider[k]["polls"])) for k in keys if k in provider),
        "cancel_requests": sum(int(str(provider[k]["cancel_requests"])) for k in keys if k in provider),
    }


def resumed_by_another_worker(database: Database, app_class: type[LedgerApplication],
                              flow: dict[UUID, Provisioning]) -> list[str]:
    """The labels of the flow's operations whose polling another worker took over: after
    ``Accepted``, poll lease claims (``Claimed``) by more than one worker. The first worker held
    them when it was SIGKILLed mid-poll, and the second resumed them from the recorded remote id.
    Read from the ledger (read-only on SQLite), so the demo's summary shows the kill happened
    where it says, not only that it was attempted.

    Source: issue 12 item 6 ("SIGKILLs the worker mid-poll ... restarts").
    """
    app = app_class(env=database.library_env(create_table=False, read_only=not database_driver(database).shared))
    try:
        resumed = []
        for op_id, plan in flow.items():
            holders: set[str] = set()
            accepted = False
            for event in app.events.get(op_id):
                if isinstance(event, Operation.Accepted):
                    accepted = True
                elif accepted and isinstance(event, Operation.Claimed):
                    holders.add(event.worker_id)
            if len(holders) > 1:
                resumed.append(plan.label)
        return resumed
    finally:
        app.close()
