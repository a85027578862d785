"""A host application for tests: one integration per delivery mode, short budgets and timeouts.

Importable by worker processes as ``tests.apps:ModesApp`` (they run with the repo root on
``PYTHONPATH``).
"""

from __future__ import annotations

import os
import time
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event
from pydantic import BaseModel, Field

from ledger.application import LedgerApplication
from ledger.declarations import DeliveryMode, Integration
from ledger.inbound import CommandContext, CommandRefused, Reply, command
from ledger.settlement import SettlementOutcome

MAX_ATTEMPTS = 3
REQUEST_TIMEOUT_SECONDS = 0.5


def declaration(mode: DeliveryMode, **overrides: Any) -> Integration:
    """The test integration for ``mode`` (name ``test.<mode>``)."""
    data: dict[str, Any] = {
        "name": f"test.{mode.value}",
        "version": 1,
        "adapter": "webhook",
        "delivery_mode": mode.value,
        "request_timeout_seconds": REQUEST_TIMEOUT_SECONDS,
        "retry": {"max_attempts": MAX_ATTEMPTS, "base_backoff_seconds": 0.05, "max_backoff_seconds": 0.2,
                  "jitter": 0.0},
        "deadlines": {"pending": 300, "claimed": 60, "dispatching": 60, "accepted": 60},
        "settlement": {"entity_type": "tests.apps:Thing", "method": "on_result", "max_attempts": 3,
                       "backoff_seconds": 0.05},
        "payload": {"n": "public", "note": "internal", "token": "secret"},
    }
    data.update(overrides)
    return Integration.parse(data)


class Thing(Aggregate):
    """A source entity whose settlement action records the result."""

    @event("Made")
    def __init__(self, label: str) -> None:
        self.label = label
        self.results: list[str] = []

    def on_result(self, outcome: SettlementOutcome) -> None:
        self._settled(outcome.result)

    @event("Settled")
    def _settled(self, result: str) -> None:
        self.results.append(result)


class ModesApp(LedgerApplication):
    """One integration per delivery mode."""

    name = "modes"
    integrations = [declaration(mode) for mode in DeliveryMode]

    def make(self, mode: DeliveryMode | str, target: str, *, n: int = 0) -> UUID:
        """Create a Thing and intend one operation for it, co-committed. Returns the operation id."""
        thing = Thing(label=f"thing-{n}")
        op = self.intend(thing, f"test.{DeliveryMode(mode).value}", target=target,
                         payload={"n": n, "note": "internal note", "token": "secretref:test-token"})
        self.save(thing, op)
        return op.id


class PatientModesApp(ModesApp):
    """``ModesApp`` with a 5 s request timeout, for drains under load: on a busy CI machine the
    reference partner (which commits each request to SQLite before answering) can take longer than
    0.5 s, and a timed-out call is ambiguous for a reason those tests are not about."""

    name = "modes"  # the same store as ModesApp's (eventsourcing names each subclass after itself)
    integrations = [declaration(mode, request_timeout_seconds=5.0) for mode in DeliveryMode]


class Fragile(Thing):
    """A :class:`Thing` whose settlement action raises when its label says ``boom`` (an
    ``Exception``) or ``exit`` (``SystemExit``). Its own entity type (``tests.apps:Fragile``)."""

    def on_result(self, outcome: SettlementOutcome) -> None:
        if self.label == "boom":
            raise RuntimeError("the host's settlement action failed on purpose")
        if self.label == "exit":
            raise SystemExit(3)  # a host bug that is not an Exception
        super().on_result(outcome)


class FakeApp(LedgerApplication):
    """One idempotent integration on the in-memory fake adapter (``adapters.fake``)."""

    name = "fakes"
    integrations = [declaration(DeliveryMode.IDEMPOTENT, name="test.fake", adapter="fake",
                                settlement={"entity_type": "tests.apps:Fragile", "method": "on_result",
                                            "max_attempts": 2, "backoff_seconds": 1.0})]

    def make(self, label: str, target: str = "https://partner.test/call") -> UUID:
        """Create a Fragile entity and intend one operation for it. Returns the operation id."""
        entity = Fragile(label=label)
        op = self.intend(entity, "test.fake", target=target, payload={"n": 0})
        self.save(entity, op)
        return op.id


class BudgetApp(ModesApp):
    """``ModesApp`` whose idempotent integration allows 10 calls per 2 s (issue 14's acceptance)."""

    name = "modes"
    integrations = [declaration(DeliveryMode.IDEMPOTENT, budgets={"calls_per_window": 10, "window_seconds": 2.0})]


class NestedBudgetApp(ModesApp):
    """Hierarchical call budgets (issue 14): 8 calls per 2 s in all; the idempotent integration
    6 of them, each tenant 3; the non-idempotent integration has no budget of its own."""

    name = "modes"
    global_call_budget = {"calls_per_window": 8, "window_seconds": 2.0}
    integrations = [
        declaration(DeliveryMode.IDEMPOTENT, budgets={"calls_per_window": 6, "window_seconds": 2.0,
                                                      "per_tenant": {"calls_per_window": 3, "window_seconds": 2.0}}),
        declaration(DeliveryMode.NON_IDEMPOTENT)]

    def make_for(self, mode: DeliveryMode | str, target: str, tenant: str, *, n: int = 0) -> UUID:
        """``make`` for ``tenant``. Returns the operation id."""
        thing = Thing(label=f"thing-{n}")
        op = self.intend(thing, f"test.{DeliveryMode(mode).value}", target=target, tenant=tenant,
                         payload={"n": n, "note": "internal note", "token": "secretref:test-token"})
        self.save(thing, op)
        return op.id


# ---------------------------------------------------------------------------------------------
# Inbound commands (issue 15): a host application whose commands run under idempotency receipts.

RUNS_FILE_ENV = "OPLEDGER_TEST_RUNS_FILE"
"""When set, every handler run appends ``<pid> <command> <label>`` to this file (across processes)."""


class Ticket(Aggregate):
    """A source entity created and renamed by commands; its settlement action records the
    result."""

    @event("Opened")
    def __init__(self, label: str) -> None:
        self.label = label
        self.results: list[str] = []

    @event("Renamed")
    def rename(self, label: str) -> None:
        self.label = label

    def on_result(self, outcome: SettlementOutcome) -> None:
        self._settled(outcome.result)

    @event("Settled")
    def _settled(self, result: str) -> None:
        self.results.append(result)


class MakeTicket(BaseModel):
    label: str = Field(min_length=1, max_length=100)
    n: int = Field(default=0, ge=0, le=10**9)
    sleep_seconds: float = Field(default=0.0, ge=0, le=30)
    target: str | None = Field(default=None, max_length=3000)  # passed to intend unchecked (tryout R4)


class RenameTicket(BaseModel):
    ticket_id: UUID
    label: str = Field(min_length=1, max_length=100)


def _record_run(name: str, label: str) -> None:
    path = os.environ.get(RUNS_FILE_ENV)
    if path:
        with open(path, "a") as runs:
            runs.write(f"{os.getpid()} {name} {label}\n")


class CommandsApp(LedgerApplication):
    """Commands over tickets: ``make_ticket`` (201, Location, ETag, an intended operation;
    label ``taken`` is refused with a typed 409, ``boom`` raises), ``rename_ticket`` (key
    required; an unknown ticket is a 404 refusal)."""

    name = "commands"
    # Tickets intend it, so it settles into tickets (issue 32: intend checks the entity's type).
    integrations = [declaration(DeliveryMode.IDEMPOTENT,
                                settlement={"entity_type": "tests.apps:Ticket", "method": "on_result",
                                            "max_attempts": 3, "backoff_seconds": 0.05})]

    @command("make_ticket", request=MakeTicket, summary="Open a ticket and intend its webhook")
    def make_ticket(self, ctx: CommandContext, request: MakeTicket) -> Reply:
        _record_run("make_ticket", request.label)
        if request.sleep_seconds:
            time.sleep(request.sleep_seconds)
        if request.label == "taken":
            raise CommandRefused("label_taken", "a ticket with this label exists", status=409, retryable=False)
        if request.label == "boom":
            raise RuntimeError("the handler failed on purpose")
        ticket = Ticket(label=request.label)
        op = self.intend(ticket, "test.idempotent", target=request.target or "https://partner.test/tickets",
                         principal=ctx.principal,
                         payload={"n": request.n, "note": "", "token": "secretref:test-token"}, now=ctx.now)
        ctx.stage(ticket, op)
        return Reply(201, body={"ticket_id": str(ticket.id), "label": ticket.label, "operation_id": str(op.id)},
                     headers={"Location": f"/tickets/{ticket.id}", "ETag": f'"{ticket.version}"',
                              "X-Ticket-Label": ticket.label})

    @command("rename_ticket", request=RenameTicket, key_required=True, summary="Rename a ticket")
    def rename_ticket(self, ctx: CommandContext, request: RenameTicket) -> Reply:
        _record_run("rename_ticket", request.label)
        ticket: Ticket = self.repository.get(request.ticket_id)
        ticket.rename(request.label)
        ctx.stage(ticket)
        return Reply(200, body={"ticket_id": str(ticket.id), "label": ticket.label},
                     headers={"ETag": f'"{ticket.version}"'})
