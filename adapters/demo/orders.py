"""An example host application: an order's placement authorizes an idempotent payment call and
a non-idempotent notification webhook, co-committed with the order's ``Placed`` event.

This is what a user's own application looks like; the demo and the tests drive it.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate, event

from adapters.demo.lro_flow import PROVISIONING
from ledger.application import LedgerApplication
from ledger.declarations import Integration
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


class Order(Aggregate):
    """An order. Its settlement actions only record what the ledger reports."""

    @event("Placed")
    def __init__(self, customer_email: str, amount_cents: int, currency: str = "EUR") -> None:
        self.customer_email = customer_email
        self.amount_cents = amount_cents
        self.currency = currency
        self.payment: str | None = None
        self.notification: str | None = None

    def on_payment(self, outcome: SettlementOutcome) -> None:
        """Settlement action for ``payments.charge``."""
        self._payment_settled(str(outcome.operation_id), outcome.result)

    def on_notified(self, outcome: SettlementOutcome) -> None:
        """Settlement action for ``notifications.send``."""
        self._notification_settled(str(outcome.operation_id), outcome.result)

    @event("PaymentSettled")
    def _payment_settled(self, operation_id: str, result: str) -> None:
        self.payment = result

    @event("NotificationSettled")
    def _notification_settled(self, operation_id: str, result: str) -> None:
        self.notification = result


class OrdersApp(LedgerApplication):
    """The demo host application (its workspaces' provisioning: ``adapters.demo.lro_flow``)."""

    name = "orders"
    integrations = [PAYMENTS, NOTIFICATIONS, PROVISIONING]

    def place_order(
        self, *, customer_email: str, amount_cents: int, payments_url: str, notify_url: str,
        principal: str = "demo", traceparent: str | None = None,
    ) -> tuple[UUID, list[UUID]]:
        """Place an order; its ``Placed`` event and both intents commit in one transaction.

        Returns:
            ``(order id, [payment operation id, notification operation id])``.
        """
        order = Order(customer_email=customer_email, amount_cents=amount_cents)
        common: dict[str, Any] = {"principal": principal, "traceparent": traceparent}
        pay = self.intend(order, "payments.charge", target=payments_url, effect_index=0, payload={
            "order_id": str(order.id), "amount_cents": amount_cents, "currency": order.currency,
            "card_token": "secretref:demo-card",
        }, **common)
        note = self.intend(order, "notifications.send", target=notify_url, effect_index=1, payload={
            "order_id": str(order.id), "email": customer_email, "template": "order_placed",
        }, **common)
        self.save(order, pay, note)
        return order.id, [pay.id, note.id]


def new_email() -> str:
    """A throwaway customer address for demos and tests."""
    return f"customer-{uuid4().hex[:8]}@example.test"
