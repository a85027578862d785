"""An example host application: an order's placement authorizes an idempotent payment call and
a non-idempotent notification webhook, co-committed with the order's ``Placed`` event.

This is what a user's own application looks like; the demo and the tests drive it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate, event
from pydantic import BaseModel, Field, field_validator

from adapters.demo.lro_flow import PROVISIONING
from ledger.application import LedgerApplication
from ledger.declarations import Integration
from ledger.inbound import CommandContext, CommandRefused, Reply, command
from ledger.intents import target_problem
from ledger.operation import Operation
from ledger.settlement import SettlementOutcome

PAYMENTS = Integration.parse({
    "name": "payments.charge",
    "version": 1,
    "adapter": "webhook",
    "delivery_mode": "idempotent",
    "request_timeout_seconds": 2.0,
    "retry": {"max_attempts": 5, "base_backoff_seconds": 0.2, "max_backoff_seconds": 2.0, "jitter": 0.2},
    "deadlines": {"pending": 600, "claimed": 60, "dispatching": 120, "accepted": 600},
    "settlement": {"entity_type": "adapters.demo.orders:Order", "method": "on_payment", "max_attempts": 5,
                   "backoff_seconds": 0.2},
    "payload": {"order_id": "public", "amount_cents": "public", "currency": "public", "card_token": "secret"},
})

NOTIFICATIONS = Integration.parse({
    "name": "notifications.send",
    "version": 1,
    "adapter": "webhook",
    "delivery_mode": "non_idempotent",
    "request_timeout_seconds": 2.0,
    "retry": {"max_attempts": 3, "base_backoff_seconds": 0.2, "max_backoff_seconds": 2.0, "jitter": 0.2},
    "deadlines": {"pending": 600, "claimed": 60, "dispatching": 120, "accepted": 600},
    "settlement": {"entity_type": "adapters.demo.orders:Order", "method": "on_notified", "max_attempts": 5,
                   "backoff_seconds": 0.2},
    "payload": {"order_id": "public", "email": "internal", "template": "public"},
})

FULFILMENT = Integration.parse({
    "name": "orders.fulfil",
    "version": 1,
    "adapter": "webhook",
    "delivery_mode": "callback",  # the warehouse accepts, then calls back with the result
    "request_timeout_seconds": 2.0,
    "retry": {"max_attempts": 3, "base_backoff_seconds": 0.2, "max_backoff_seconds": 2.0, "jitter": 0.2},
    "deadlines": {"pending": 600, "claimed": 60, "dispatching": 120, "accepted": 600},
    "settlement": {"entity_type": "adapters.demo.orders:Order", "method": "on_fulfilled", "max_attempts": 5,
                   "backoff_seconds": 0.2},
    "payload": {"order_id": "public", "items": "public"},
})
"""The demo's ``callback``-mode integration (``adapters.demo.callback_flow``)."""


class Order(Aggregate):
    """An order. Its settlement actions only record what the ledger reports."""

    @event("Placed")
    def __init__(self, customer_email: str, amount_cents: int, currency: str = "EUR") -> None:
        self.customer_email = customer_email
        self.amount_cents = amount_cents
        self.currency = currency
        self.payment: str | None = None
        self.notification: str | None = None
        self.fulfilment: str | None = None

    def on_payment(self, outcome: SettlementOutcome) -> None:
        """Settlement action for ``payments.charge``."""
        self._payment_settled(str(outcome.operation_id), outcome.result)

    def on_notified(self, outcome: SettlementOutcome) -> None:
        """Settlement action for ``notifications.send``."""
        self._notification_settled(str(outcome.operation_id), outcome.result)

    def on_fulfilled(self, outcome: SettlementOutcome) -> None:
        """Settlement action for ``orders.fulfil``."""
        self._fulfilment_settled(str(outcome.operation_id), outcome.result)

    @event("FulfilmentRequested")
    def request_fulfilment(self) -> None:
        """The transition that authorizes the fulfilment call."""

    @event("FulfilmentSettled")
    def _fulfilment_settled(self, operation_id: str, result: str) -> None:
        self.fulfilment = result

    @event("PaymentSettled")
    def _payment_settled(self, operation_id: str, result: str) -> None:
        self.payment = result

    @event("NotificationSettled")
    def _notification_settled(self, operation_id: str, result: str) -> None:
        self.notification = result


ORDER_LIMIT_CENTS = 1_000_000
"""The demo's largest order, cents (a larger one is a typed refusal)."""


class PlaceOrder(BaseModel):
    """The ``place_order`` command's body. The URLs are checked as the ledger checks an
    operation's target (``ledger.intents.target_problem``: http or https, no credentials), so a
    bad one is a 422 ``invalid_request`` naming the field."""

    customer_email: str = Field(min_length=3, max_length=200, pattern=r"^[^@\s]+@[^@\s]+$")
    amount_cents: int = Field(gt=0, le=10**12)
    payments_url: str = Field(min_length=1, max_length=2000)
    notify_url: str = Field(min_length=1, max_length=2000)

    @field_validator("payments_url", "notify_url")
    @classmethod
    def _a_target(cls, value: str) -> str:
        problem = target_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


class OrdersApp(LedgerApplication):
    """The demo host application (its workspaces' provisioning: ``adapters.demo.lro_flow``)."""

    name = "orders"
    integrations = [PAYMENTS, NOTIFICATIONS, FULFILMENT, PROVISIONING]

    def place_order(
        self, *, customer_email: str, amount_cents: int, payments_url: str, notify_url: str,
        principal: str = "demo", traceparent: str | None = None,
    ) -> tuple[UUID, list[UUID]]:
        """Place an order; its ``Placed`` event and both intents commit in one transaction.

        Returns:
            ``(order id, [payment operation id, notification operation id])``.
        """
        order, pay, note = self._placed(customer_email=customer_email, amount_cents=amount_cents,
                                        payments_url=payments_url, notify_url=notify_url, principal=principal,
                                        traceparent=traceparent)
        self.save(order, pay, note)
        return order.id, [pay.id, note.id]

    @command("place_order", request=PlaceOrder, key_required=True,
             summary="Place an order: its payment and notification are intended in the same commit")
    def place_order_command(self, ctx: CommandContext, request: PlaceOrder) -> Reply:
        """``POST /v1/commands/place_order`` (issue 15): 201 with ``Location`` and ``ETag``; an
        order over the demo's limit is refused (``amount_over_limit``, not retryable)."""
        if request.amount_cents > ORDER_LIMIT_CENTS:
            raise CommandRefused("amount_over_limit", f"orders are limited to {ORDER_LIMIT_CENTS} cents")
        order, pay, note = self._placed(customer_email=request.customer_email, amount_cents=request.amount_cents,
                                        payments_url=request.payments_url, notify_url=request.notify_url,
                                        principal=ctx.principal, traceparent=None, now=ctx.now)
        ctx.stage(order, pay, note)
        return Reply(201, body={"order_id": str(order.id), "operation_ids": [str(pay.id), str(note.id)]},
                     headers={"Location": f"/orders/{order.id}", "ETag": f'"{order.version}"'})

    def _placed(self, *, customer_email: str, amount_cents: int, payments_url: str, notify_url: str,
                principal: str, traceparent: str | None,
                now: datetime | None = None) -> tuple[Order, Operation, Operation]:
        order = Order(customer_email=customer_email, amount_cents=amount_cents)
        common: dict[str, Any] = {"principal": principal, "traceparent": traceparent, "now": now}
        pay = self.intend(order, "payments.charge", target=payments_url, effect_index=0, payload={
            "order_id": str(order.id), "amount_cents": amount_cents, "currency": order.currency,
            "card_token": "secretref:demo-card",
        }, **common)
        note = self.intend(order, "notifications.send", target=notify_url, effect_index=1, payload={
            "order_id": str(order.id), "email": customer_email, "template": "order_placed",
        }, **common)
        return order, pay, note

    def fulfil_order(self, order_id: UUID, *, fulfil_url: str, principal: str = "demo") -> UUID:
        """Ask the warehouse to fulfil an order; ``FulfilmentRequested`` and the intent commit
        together. Returns the operation id."""
        order: Order = self.repository.get(order_id)
        order.request_fulfilment()
        op = self.intend(order, "orders.fulfil", target=fulfil_url, principal=principal,
                         payload={"order_id": str(order.id), "items": 1})
        self.save(order, op)
        return op.id


def new_email() -> str:
    """A throwaway customer address for demos and tests."""
    return f"customer-{uuid4().hex[:8]}@example.test"
