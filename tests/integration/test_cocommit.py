"""Co-commit on both backends: the entity event and the intent commit together or not at all."""

from __future__ import annotations

import pytest
from eventsourcing.persistence import IntegrityError

from adapters.demo.orders import Order, OrdersApp
from ledger.errors import IntentConflictError
from ledger.operation import Operation

PAY = {"currency": "EUR", "card_token": "secretref:card"}


def _payload(order: Order, amount: int = 100) -> dict:
    return {"order_id": str(order.id), "amount_cents": amount, **PAY}


def _log(app: OrdersApp) -> list[tuple[str, int]]:
    return [(n.topic.rsplit(".", 1)[-1], n.originator_version)
            for n in app.recorder.select_notifications(start=1, limit=1000)]


def test_entity_and_intent_are_recorded_in_one_save(orders_app: OrdersApp) -> None:
    order_id, (pay_id, note_id) = orders_app.place_order(
        customer_email="a@example.test", amount_cents=100, payments_url="http://p/pay", notify_url="http://p/n")
    assert orders_app.repository.get(order_id).version == 1
    assert orders_app.get_operation(pay_id).source.entity_id == order_id
    assert orders_app.get_operation(note_id).source.effect_index == 1
    assert sorted(t for t, _ in _log(orders_app)) == ["Intended", "Intended", "Placed"]


def _settled_and_intended(orders_app: OrdersApp) -> tuple[Order, Order, Operation]:
    """A saved order; a loaded copy of it with its payment settled (a transition, not saved);
    and the ``payments.charge`` operation intended from that transition (not saved either)."""
    order = Order(customer_email="a@example.test", amount_cents=100)
    orders_app.save(order)
    loaded = orders_app.repository.get(order.id)
    loaded._payment_settled("x", "succeeded")
    return order, loaded, orders_app.intend(loaded, "payments.charge", payload=_payload(loaded),
                                            target="http://p/pay")


def test_entity_version_conflict_rolls_back_the_intent(orders_app: OrdersApp) -> None:
    order = Order(customer_email="a@example.test", amount_cents=100)
    orders_app.save(order)
    first = orders_app.repository.get(order.id)
    second = orders_app.repository.get(order.id)
    first._payment_settled("x", "succeeded")
    orders_app.save(first)
    # The second copy makes a conflicting transition and intends an operation for it.
    second._payment_settled("y", "failed")
    op = orders_app.intend(second, "payments.charge", payload=_payload(second), target="http://p/pay")
    with pytest.raises(IntegrityError):
        orders_app.save(second, op)
    assert orders_app._find_operation(op.id) is None, "the intent must not survive the failed save"
    assert orders_app.repository.get(order.id).version == 2


def test_operation_conflict_rolls_back_the_entity_event(orders_app: OrdersApp) -> None:
    order, loaded, op = _settled_and_intended(orders_app)
    # Someone else records the same operation first (same derived id), without the entity event.
    orders_app.save(Operation.intend(
        now=orders_app.clock.now(), integration=orders_app.registry.get("payments.charge"),
        source=op.source, payload=_payload(loaded), target="http://p/pay"))
    with pytest.raises(IntegrityError):
        orders_app.save(loaded, op)
    assert orders_app.repository.get(order.id).version == 1, "the entity event must not survive"


def test_replaying_a_transition_yields_the_same_operation_id(orders_app: OrdersApp) -> None:
    order = Order(customer_email="a@example.test", amount_cents=100)
    orders_app.save(order)
    ids = []
    for _ in range(2):
        loaded = orders_app.repository.get(order.id)
        loaded._payment_settled("x", "succeeded")
        ids.append(orders_app.intend(loaded, "payments.charge", payload=_payload(loaded), target="http://p/pay").id)
    assert ids[0] == ids[1]


def test_exact_retry_returns_the_stored_operation_and_a_changed_intent_conflicts(orders_app: OrdersApp) -> None:
    order, loaded, op = _settled_and_intended(orders_app)
    orders_app.save(loaded, op)

    replay = orders_app.repository.get(order.id, version=1)
    replay._payment_settled("x", "succeeded")
    again = orders_app.intend(replay, "payments.charge", payload=_payload(replay), target="http://p/pay")
    assert again.id == op.id and not again.pending_events

    with pytest.raises(IntentConflictError) as caught:
        orders_app.intend(replay, "payments.charge", payload=_payload(replay, amount=999), target="http://p/pay")
    assert caught.value.operation_id == op.id
