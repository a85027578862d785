"""The read side in memory: the library's POPO recorder, the in-memory status view, a fake clock,
no threads (issue 10 item 2: what the simulator will drive)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import StoredEvent

from adapters.demo.orders import OrdersApp
from ledger.clock import FakeClock
from ledger.operation import Operation
from projections import status as status_module
from projections.memory_view import MemoryStatusStore
from projections.rows import row_from_operation
from projections.status import PROJECTION_NAME, StatusProjection, StatusProjectionConfig
from projections.views import open_view
from tests.conftest import succeed_directly

POPO = {"PERSISTENCE_MODULE": "eventsourcing.popo"}


@pytest.fixture
def app(clock: FakeClock) -> Iterator[OrdersApp]:
    app = OrdersApp(env=POPO, clock=clock)
    yield app
    app.close()


@pytest.fixture
def store(clock: FakeClock) -> MemoryStatusStore:
    return MemoryStatusStore(clock=clock)


@pytest.fixture(autouse=True)
def no_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the in-memory read side started a thread pool")

    monkeypatch.setattr(status_module, "ThreadPoolExecutor", refuse)


def _place(app: OrdersApp, n: int) -> tuple[list[UUID], list[UUID]]:
    orders, ops = [], []
    for i in range(n):
        order_id, op_ids = app.place_order(customer_email=f"c{i}@example.test", amount_cents=100 + i,
                                           payments_url="http://p/pay", notify_url="http://p/n")
        orders.append(order_id)
        ops.extend(op_ids)
    return orders, ops


def _expected_rows(app: OrdersApp, ops: list[UUID]) -> dict[UUID, Any]:
    return {op_id: row_from_operation(app.repository.get(op_id)) for op_id in ops}


def test_intents_co_commit_and_the_projection_catches_up_in_memory(app: OrdersApp, store: MemoryStatusStore,
                                                                   clock: FakeClock) -> None:
    orders, ops = _place(app, 3)
    assert app.recorder.max_notification_id() == 9  # each order and its two intents: one commit
    for op_id in ops[:2]:
        clock.advance(1)
        succeed_directly(app, op_id, clock)
    view = open_view(store)
    projection = StatusProjection(app=app, view=view, config=StatusProjectionConfig(batch_size=4))
    assert projection.catch_up() == 6 + 2 * 3  # the intents, and three events per driven operation
    assert {row.operation_id: row for row in view.list()} == _expected_rows(app, ops)
    assert view.counts() == {"pending": 4, "succeeded": 2}
    assert view.position(PROJECTION_NAME, app.name) == app.recorder.max_notification_id()
    # Pending operations are due to be claimed, succeeded ones to be settled.
    assert {due.operation_id for due in view.due(clock.now(), 100)} == set(ops)

    _, more = _place(app, 1)
    succeed_directly(app, ops[2], clock)
    assert projection.run_once() == 4  # one batch
    assert projection.catch_up() == 1
    assert {row.operation_id: row for row in view.list()} == _expected_rows(app, ops + more)
    assert projection.run_once() == 0


def test_rebuild_in_memory_gives_identical_rows(app: OrdersApp, store: MemoryStatusStore, clock: FakeClock) -> None:
    _, ops = _place(app, 4)
    for op_id in ops[::2]:
        succeed_directly(app, op_id, clock)
    view = open_view(store)
    StatusProjection(app=app, view=view).catch_up()
    before, position = view.list(limit=1000), view.position(PROJECTION_NAME, app.name)
    fresh = StatusProjection(app=app, view=open_view(store),
                             config=StatusProjectionConfig(batch_size=3, cache_size=1))
    assert fresh.rebuild() == position - 4  # every notification but the four Placed events
    assert view.list(limit=1000) == before
    assert view.position(PROJECTION_NAME, app.name) == position


def test_a_record_that_does_not_decode_quarantines_its_operation_only(app: OrdersApp, store: MemoryStatusStore,
                                                                      clock: FakeClock) -> None:
    _, ops = _place(app, 2)
    bad = ops[0]
    app.recorder.insert_events([StoredEvent(originator_id=bad, originator_version=2,
                                            topic=Operation.Claimed.__module__ + ":Operation.Claimed",
                                            state=b"\xff not a ledger event")])
    succeed_directly(app, ops[1], clock)
    view = open_view(store)
    projection = StatusProjection(app=app, view=view)
    projection.catch_up()
    assert bad in projection.quarantined
    assert [row.operation_id for row in view.attention()] == [bad]
    assert bad not in {due.operation_id for due in view.due(clock.now(), 100)}
    assert view.get(ops[1]) == row_from_operation(app.repository.get(ops[1]))


def test_one_projection_leads_a_shared_memory_store(app: OrdersApp, store: MemoryStatusStore,
                                                    clock: FakeClock) -> None:
    _place(app, 2)
    config = StatusProjectionConfig(lease_seconds=3.0)
    first = StatusProjection(app=app, view=open_view(store), config=config, holder="a")
    second = StatusProjection(app=app, view=open_view(store), config=config, holder="b")
    assert first.catch_up() == 4
    _place(app, 1)
    assert second.catch_up() == 0  # the store's clock says the first still leads
    clock.advance(3.5)
    assert second.catch_up() == 2
    assert first.run_once() == 0


def test_the_guides_example_runs() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guide.md").read_text()
    section = guide.split("### In memory", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert code is not None
    exec(compile(code.group(1), "docs/guide.md", "exec"), {})
