"""Deterministic recovery (issue 17): a store whose worker crashed after recording outcomes and
before settling them is recovered three times, by workers whose random sources differ; each
entity's settlements apply in the same order every time, by effect index
(``ledger.decisions.settlement_order``). Settlement in the outcome's own commit
(``SettlementService.co_settle``) keeps that order, and an entity change that cannot be stored
never costs the outcome. Both backends."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar
from uuid import UUID

import pytest
from eventsourcing.domain import Aggregate, event

from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from ledger.application import LedgerApplication
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.declarations import DeliveryMode, Integration
from ledger.settlement import SettlementOutcome
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import declaration
from tests.conftest import drop_schema, new_postgres_url, require_postgres
from tests.stores import migrated_store

ENTITIES = 5
EFFECTS = 3


class Ledgerbook(Aggregate):
    """An entity whose settlement action records which operation it settled."""

    @event("Opened")
    def __init__(self, name: str) -> None:
        self.name = name
        self.settled: list[UUID] = []

    def on_result(self, outcome: SettlementOutcome) -> None:
        self._settled(outcome.operation_id)

    def on_result_unstorable(self, outcome: SettlementOutcome) -> None:
        self._noted("\ud800")  # a lone surrogate: no codec can store this entity's event

    @event("Noted")
    def _noted(self, note: str) -> None:
        self.note = note

    @event("Settled")
    def _settled(self, operation_id: UUID) -> None:
        self.settled.append(operation_id)


class ThreeEffectsApp(LedgerApplication):
    """Each transition intends three operations (effects 0, 1, 2)."""

    name = "threefx"
    integrations: ClassVar[list[Integration]] = [declaration(
        DeliveryMode.IDEMPOTENT, name="test.fx", adapter="fake",
        settlement={"entity_type": f"{__name__}:Ledgerbook", "method": "on_result", "max_attempts": 3,
                    "backoff_seconds": 1.0}),
        declaration(DeliveryMode.IDEMPOTENT, name="test.unstorable", adapter="fake",
                    settlement={"entity_type": f"{__name__}:Ledgerbook", "method": "on_result_unstorable",
                                "max_attempts": 1, "backoff_seconds": 1.0})]

    def open_book(self, name: str) -> tuple[UUID, dict[UUID, int]]:
        book = Ledgerbook(name=name)
        ops = [self.intend(book, "test.fx", target="https://p.test/fx", payload={"n": i}, effect_index=i)
               for i in range(EFFECTS)]
        self.save(book, *ops)
        return book.id, {op.id: i for i, op in enumerate(ops)}


@pytest.fixture
def fresh_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Database]]:
    """Make fresh stores of the test's backend (one per recovery)."""
    backend = request.node.callspec.params["backend"]
    schemas: list[str] = []

    def make() -> Database:
        if backend == "sqlite":
            return Database.parse(f"sqlite:///{tmp_path / f'store-{len(schemas)}' / 'opledger.db'}")
        require_postgres()
        url, schema = new_postgres_url()
        schemas.append(schema)
        return Database.parse(url)

    if backend == "sqlite":
        schemas.append("")  # counts the stores made
    yield make
    for schema in schemas:
        if schema:
            drop_schema(schema)


def _worker(app: LedgerApplication, database: Database, clock: FakeClock, seed: int) -> tuple[Worker, Any]:
    view = open_view(database)
    projection = StatusProjection(app=app, view=view)
    worker = Worker(app=app, view=view, adapters={"fake": FakeAdapter()}, clock=clock,
                    config=WorkerConfig(worker_id=f"w{seed}", lease_seconds=10, inline_egress=True),
                    rng=random.Random(seed), projection=projection, on_committed=projection.offer)
    return worker, projection


def _crash_then_recover(database: Database, seed: int) -> list[list[int]]:
    """Per entity, the effect indexes in the order their settlements applied."""
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    migrated_store(database, ThreeEffectsApp)
    app = ThreeEffectsApp(env=database.library_env(create_table=False), clock=clock)
    try:
        books = [app.open_book(f"book-{i}") for i in range(ENTITIES)]
        first, projection = _worker(app, database, clock, seed)
        projection.run_once()
        first.claims.run_once(clock.now())
        first.egress.run_once(clock.now())
        # Outcomes recorded, each entity's effect 0 settled with its outcome; the crash comes
        # before the others settle.
        first.outcomes.run_once(clock.now())
        first.close()
        projection.view.close()
        clock.advance(1)
        second, projection = _worker(app, database, clock, seed * 7919)
        for _ in range(ENTITIES * EFFECTS):
            second.run_once()
            clock.advance(1)
        second.close()
        projection.view.close()
        orders = []
        for book_id, effects in books:
            book: Ledgerbook = app.repository.get(book_id)
            orders.append([effects[op_id] for op_id in book.settled])
        return orders
    finally:
        app.close()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_crashed_store_recovers_to_the_same_settlement_order_every_time(
        backend: str, fresh_store: Callable[[], Database]) -> None:
    orders = [_crash_then_recover(fresh_store(), seed) for seed in (1, 2, 3)]
    assert orders[0] == [list(range(EFFECTS))] * ENTITIES  # every entity: effect 0, then 1, then 2
    assert orders[0] == orders[1] == orders[2]


def _settled_effects(app: ThreeEffectsApp, books: list[tuple[UUID, dict[UUID, int]]]) -> list[list[int]]:
    return [[effects[op_id] for op_id in app.repository.get(book_id).settled] for book_id, effects in books]


@pytest.fixture
def rig(fresh_store: Callable[[], Database]) -> Iterator[tuple[FakeClock, ThreeEffectsApp, Worker, Any]]:
    """A fresh store of the test's backend, its app at a fake clock, and one worker keeping the
    projection."""
    database = fresh_store()
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    migrated_store(database, ThreeEffectsApp)
    app = ThreeEffectsApp(env=database.library_env(create_table=False), clock=clock)
    worker, projection = _worker(app, database, clock, 1)
    try:
        yield clock, app, worker, projection
    finally:
        worker.close()
        projection.view.close()
        app.close()


def _record(clock: FakeClock, worker: Worker, projection: Any) -> None:
    """Claim, call and record outcomes, with no settlement pass."""
    projection.run_once()
    worker.claims.run_once(clock.now())
    worker.egress.run_once(clock.now())
    worker.outcomes.run_once(clock.now())


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_an_outcome_settles_in_its_own_commit_one_effect_per_entity_in_order(backend: str, rig: tuple) -> None:
    clock, app, worker, projection = rig
    books = [app.open_book(f"book-{i}") for i in range(ENTITIES)]
    _record(clock, worker, projection)
    assert _settled_effects(app, books) == [[0]] * ENTITIES
    for _, effects in books:
        first = app.get_operation(next(op_id for op_id, i in effects.items() if i == 0))
        kinds = [type(e).__name__ for e in app.repository.event_store.get(first.id)]
        assert kinds[-2:] == ["Succeeded", "Settled"], kinds
    worker.settlement.run_once(clock.now())  # the others, one per entity per batch
    assert _settled_effects(app, books) == [[0, 1]] * ENTITIES
    worker.settlement.run_once(clock.now())
    assert _settled_effects(app, books) == [[0, 1, 2]] * ENTITIES


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_an_entity_change_that_cannot_be_stored_never_costs_the_outcome(backend: str, rig: tuple) -> None:
    clock, app, worker, projection = rig
    book = Ledgerbook(name="unstorable")
    bad = app.intend(book, "test.unstorable", target="https://p.test/fx", payload={"n": 1})
    fine_book, fine_effects = app.open_book("fine")
    app.save(book, bad)
    _record(clock, worker, projection)
    op = app.get_operation(bad.id)
    assert op.execution.value == "succeeded", "the provider's answer was lost with the entity's change"
    assert _settled_effects(app, [(fine_book, fine_effects)]) == [[0]], "the batch's other outcome did not settle"
    worker.settlement.run_once(clock.now())
    op = app.get_operation(bad.id)
    assert op.settlement.value == "blocked"
    assert "could not be stored" in (op.settlement_error or "")
