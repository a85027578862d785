"""A write the database refuses for one operation is that operation's problem (issue 35): a
trigger on the events table refuses one event type of one operation among 30 others in the same
batches. The worker must keep running, settle every other operation, put the refused one on
the attention queue (``write_refused``, with the database's text) and never call its provider
again. Both backends; the worker runs in this process on a fake clock, its egress inline,
keeping the status projection itself (as ``test_isolation``)."""

from __future__ import annotations

import random
from uuid import UUID

import pytest
from structlog.testing import capture_logs

from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.operation import Operation
from projections.metrics import MetricsProjection
from projections.metrics_store import MetricsStore
from projections.status import StatusProjection
from projections.views import StatusView, open_view
from tests.apps import FakeApp
from tests.refusals import MESSAGE, drop_trigger, refuse_event

OTHERS = 30
BAD = "https://partner.test/bad"


def _inline_worker(app: FakeApp, view: StatusView, adapter: FakeAdapter, clock: FakeClock,
                   worker_id: str) -> tuple[Worker, StatusProjection]:
    """A worker with 64 inline egress slots and a fixed random seed, and the status projection it
    offers every commit to (``on_committed``)."""
    projection = StatusProjection(app=app, view=view)
    worker = Worker(app=app, view=view, adapters={"fake": adapter}, clock=clock,
                    config=WorkerConfig(worker_id=worker_id, egress_slots=64, inline_egress=True),
                    rng=random.Random(7), projection=projection, on_committed=projection.offer)
    return worker, projection


def _drain(app: FakeApp, database: Database, clock: FakeClock, adapter: FakeAdapter, others: list[UUID],
           bad: UUID, cycles: int = 40) -> tuple[Worker, dict]:
    view = open_view(database)
    worker, projection = _inline_worker(app, view, adapter, clock, "refusals")
    try:
        for _ in range(cycles):
            worker.run_once()  # raises if the worker would stop: it must not
            clock.advance(1)
            last = view.get(bad)
            if (last is not None and last.attention is not None
                    and all((r := view.get(i)) is not None and r.status == "settled" for i in others)):
                break
        projection.run_once()
        left = [(str(i), r and r.status) for i in others if (r := view.get(i)) is None or r.status != "settled"]
        assert left == [], "every other operation settles"
        attention = {row.operation_id: row for row in view.attention()}
        return worker, {"row": view.get(bad), "attention": attention}
    finally:
        worker.close()
        view.close()


def _make(app: FakeApp) -> tuple[list[UUID], UUID]:
    others = [app.make(f"ok-{i}") for i in range(OTHERS)]
    return others, app.make("bad", target=BAD)


# event refused -> (execution, settlement, kind, provider calls of the refused operation)
CASES = {
    "Claimed": ("pending", "none", "claim", 0),
    "AttemptStarted": ("pending", "none", "claim", 0),
    "Succeeded": ("ambiguous", "none", "outcome", 1),
    "Settled": ("succeeded", "blocked", "settlement", 1),
}


@pytest.mark.parametrize("event", sorted(CASES))
def test_a_write_refused_for_one_operation_is_that_operations_problem(event: str, app, fake_db, clock) -> None:
    others, bad = _make(app)
    refuse_event(fake_db, app.name, bad, getattr(Operation, event))
    adapter = FakeAdapter()
    _, seen = _drain(app, fake_db, clock, adapter, others, bad)
    execution, settlement, kind, calls = CASES[event]
    op = app.get_operation(bad)
    assert (op.execution.value, op.settlement.value, op.write_refused) == (execution, settlement, kind)
    assert MESSAGE in (op.write_refused_error or "")
    assert set(seen["attention"]) == {bad} and seen["attention"][bad].attention == "write_refused"
    assert kind in (seen["row"].attention_detail or "") and seen["row"].next_due_at is None
    assert len(adapter.received(bad)) == calls, "never sent again"
    if event == "Succeeded":
        assert op.ambiguity_reason == "outcome_unstorable" and MESSAGE in op.excerpt
    if event == "Settled":
        assert MESSAGE in (op.settlement_error or "")
    assert _refusal_counters(app, fake_db) == {("opledger_writes_refused", kind): 1.0,
                                               ("opledger_attention_entries", "write_refused"): 1.0}


def _refusal_counters(app: FakeApp, database: Database) -> dict[tuple[str, str], float]:
    """The metrics projection's refused-write counters and attention entries (issue 35 item 4)."""
    view = open_view(database)
    try:
        store = MetricsStore(view)
        MetricsProjection(app=app, store=store).catch_up()
        found: dict[tuple[str, str], float] = {}
        for (name, _integration, _tenant, _mode, detail), value in store.totals().items():
            if name == "opledger_writes_refused" or (name == "opledger_attention_entries" and detail == "write_refused"):
                found[(name, detail)] = found.get((name, detail), 0.0) + value
        return found
    finally:
        view.close()


def test_a_lone_refused_operation_is_told_from_a_broken_store_by_a_probe(app, fake_db, clock) -> None:
    # Nothing else is written in its batches: only the probe writes say the store works.
    bad = app.make("bad", target=BAD)
    refuse_event(fake_db, app.name, bad, Operation.Succeeded)
    adapter = FakeAdapter()
    _, seen = _drain(app, fake_db, clock, adapter, [], bad)
    assert seen["row"].attention == "write_refused" and seen["row"].ambiguity_reason == "outcome_unstorable"
    assert len(adapter.received(bad)) == 1


def test_an_operator_retries_the_write_once_the_store_is_fixed(app, fake_db, clock) -> None:
    others, bad = _make(app)
    refuse_event(fake_db, app.name, bad, Operation.Claimed)
    adapter = FakeAdapter()
    _drain(app, fake_db, clock, adapter, others, bad)
    assert app.get_operation(bad).write_refused == "claim" and adapter.received(bad) == []
    drop_trigger(fake_db, app.name)
    op = app.get_operation(bad)
    op.resolve(now=clock.now(), principal="otto", resolution="retry_write", evidence="dropped the trigger")
    app.save(op)
    view = open_view(fake_db)
    worker = Worker(app=app, view=view, adapters={"fake": adapter}, clock=clock,
                    config=WorkerConfig(worker_id="again", egress_slots=8, inline_egress=True),
                    rng=random.Random(8), projection=StatusProjection(app=app, view=view))
    try:
        for _ in range(10):
            worker.run_once()
            clock.advance(1)
        op = app.get_operation(bad)
        assert (op.status.value, op.write_refused, len(adapter.received(bad))) == ("settled", None, 1)
    finally:
        worker.close()
        view.close()


def test_an_operation_none_of_whose_rows_the_store_takes_is_set_aside(app, fake_db, clock) -> None:
    # A policy refusing every row of one operation: not even WriteRefused can be recorded.
    others, bad = _make(app)
    refuse_event(fake_db, app.name, bad, None)
    adapter = FakeAdapter()
    view = open_view(fake_db)
    worker, projection = _inline_worker(app, view, adapter, clock, "aside")
    try:
        with capture_logs() as logs:
            for _ in range(10):
                worker.run_once()
                clock.advance(1)
        projection.run_once()
        assert all(view.get(i).status == "settled" for i in others)
        assert worker.committer.is_set_aside(bad)
        op = app.get_operation(bad)
        assert (op.execution.value, op.version, adapter.received(bad)) == ("pending", 1, [])
        set_aside = [line for line in logs if line["event"].startswith("operation set aside: the store refuses what its")]
        assert len(set_aside) == 1, logs
    finally:
        worker.close()
        view.close()
