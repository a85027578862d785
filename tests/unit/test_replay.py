"""Reconstruction through the application's repository (``ledger.replay``): the same aggregates
as the library's projector gives, without its per-event runtime protocol check."""

from __future__ import annotations

import typing

import pytest
from eventsourcing.application import project_aggregate

from adapters.demo.orders import OrdersApp
from ledger.replay import LedgerRepository, project_events
from migrations.drivers import memory_env


def _placed(app: OrdersApp) -> tuple[object, list[object]]:
    order_id, op_ids = app.place_order(customer_email="a@example.com", amount_cents=500,
                                       payments_url="https://p.test/pay", notify_url="https://p.test/note")
    return order_id, op_ids


def test_the_repository_folds_as_the_library_does_at_every_version(monkeypatch: pytest.MonkeyPatch) -> None:
    app = OrdersApp(env=memory_env())
    try:
        assert isinstance(app.repository, LedgerRepository)
        order_id, [pay_id, _] = _placed(app)
        for aggregate_id in (order_id, pay_id):
            events = list(app.repository.event_store.get(aggregate_id))
            for version in range(1, len(events) + 1):
                ours = app.repository.get(aggregate_id, version=version)
                theirs = project_aggregate(None, events[:version])
                assert ours.__dict__ == theirs.__dict__, (aggregate_id, version)  # type: ignore[union-attr]
            assert project_events(None, events).__dict__ == app.repository.get(aggregate_id).__dict__

        def no_protocol_checks(cls: type, instance: object) -> bool:
            raise AssertionError(f"a runtime protocol check ({cls.__name__}) while folding events")

        monkeypatch.setattr(typing._ProtocolMeta, "__instancecheck__", no_protocol_checks)  # type: ignore[attr-defined]
        assert app.repository.get(pay_id).id == pay_id
        assert app.repository.get(pay_id, projector_func=project_events).id == pay_id
    finally:
        app.close()


def test_an_event_that_cannot_mutate_is_refused() -> None:
    with pytest.raises(AttributeError):
        project_events(None, [object()])
