"""While the status projection stands still (its leader died and holds its lease), workers on
PostgreSQL claim new intents from the log itself, and keep reading on past the ones they handled:
a stall longer than one page of intents must not leave the rest waiting for the handover
(issue 17: the after-SIGKILL pickup row waited 2.3 s for 600 intents behind a page of 256)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from uuid import UUID

import psycopg
import pytest
from eventsourcing.persistence import OperationalError
from psycopg import sql

from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from executors.tail import TAIL_AFTER_STALL_SECONDS
from ledger import failpoints
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.operation import Operation
from ledger.persistence import APPENDED_PAYLOAD, INTENT_PAYLOAD
from ledger.topics import topics_of
from migrations.drivers import driver_of
from projections.view import StatusView
from projections.views import open_view
from tests.apps import FakeApp
from tests.conftest import drop_schema, new_postgres_url, require_postgres
from tests.stores import migrated_store

SLOTS = 4
"""Egress slots of the worker: each tail read is one page of this many intents."""


class TailApp(FakeApp):
    """``FakeApp`` under a name of its own: its notification channel is named after the
    application, not the schema, so another test's ``FakeApp`` store would notify on it too."""

    name = "tails"


@pytest.fixture
def database() -> Iterator[Database]:
    require_postgres()
    url, schema = new_postgres_url()
    try:
        yield Database.parse(url)
    finally:
        drop_schema(schema)


@pytest.fixture
def rig(database: Database) -> Iterator[tuple[FakeClock, TailApp, StatusView, Worker]]:
    """A fresh PostgreSQL store of ``FakeApp`` at a fake clock, its status view (no projection
    runs unless a test runs one) and one worker with ``SLOTS`` inline egress slots."""
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    migrated_store(database, TailApp)
    app = TailApp(env=database.library_env(create_table=False), clock=clock)
    view = open_view(database)
    worker = Worker(app=app, view=view, adapters={"fake": FakeAdapter()}, clock=clock,
                    config=WorkerConfig(worker_id="worker", egress_slots=SLOTS, egress_per_host=SLOTS,
                                        inline_egress=True), rng=random.Random(7))
    try:
        yield clock, app, view, worker
    finally:
        worker.close()
        view.close()
        app.close()


@pytest.mark.postgres
def test_a_long_stall_is_read_on_past_the_intents_already_claimed(rig: tuple) -> None:
    clock, app, view, worker = rig
    assert not view.in_process
    # No projection runs: the view stays empty and its position at 0, as behind a dead leader.
    ids = [app.make(f"op-{i}") for i in range(10 * SLOTS)]
    worker.run_once(clock.now())
    assert all(app.get_operation(op_id).attempts == 0 for op_id in ids)  # the projection may move yet
    for _ in range(40):
        clock.advance(TAIL_AFTER_STALL_SECONDS)
        worker.run_once(clock.now())
    attempts = [app.get_operation(op_id).attempts for op_id in ids]
    assert attempts == [1] * len(ids), "intents past the first page of the tail were never claimed"


@pytest.mark.postgres
def test_a_worker_told_of_appended_events_claims_a_new_intent_without_the_projection(rig: tuple) -> None:
    # Pickup latency (issue 17): after the NOTIFY of appended events a worker's next cycle reads
    # the log's tail, while the projection moves (here: has not stalled long enough); an idle
    # worker is woken for it, a busy one is not.
    clock, app, view, worker = rig
    worker.run_once(clock.now())  # nothing yet
    first = app.make("first")
    worker.run_once(clock.now())  # no NOTIFY: the view alone, which shows nothing yet
    assert app.get_operation(first).attempts == 0
    worker.wake_for_log()  # a busy worker: not woken, but its next cycle reads the tail
    assert not worker.egress.wake.is_set()
    worker.run_once(clock.now())
    assert app.get_operation(first).attempts == 1
    second = app.make("second")
    worker._idling = True  # as while it waits in ``_idle``
    worker.wake_for_log()
    worker._idling = False
    assert worker.egress.wake.is_set()  # an idle worker is woken for it
    worker.run_once(clock.now())
    assert app.get_operation(second).attempts == 1


@pytest.mark.postgres
def test_only_an_appended_intent_sends_workers_to_the_tail(rig: tuple, database: Database) -> None:
    # The insert function's NOTIFY says whether an intent was appended; a worker's claim commit
    # (or any other append) sends no worker to read the tail (executors.runtime.wake_for_log).
    clock, app, view, worker = rig
    channel = app.recorder.channel_name
    with psycopg.connect(database.conninfo(), autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        op_id = app.make("first")
        assert _payloads(listener) == [INTENT_PAYLOAD]
        worker.wake_for_log(INTENT_PAYLOAD)
        assert worker.claims.tail.fresh
        worker.run_once(clock.now())  # claims it from the tail: Claimed and AttemptStarted
        assert app.get_operation(op_id).attempts == 1 and not worker.claims.tail.fresh
        appended = _payloads(listener)  # the claim's commit, and the outcome's (inline egress)
        assert appended and set(appended) == {APPENDED_PAYLOAD}
        worker.egress.wake.clear()  # set by the inline call's result
        worker._idling = True  # as while it waits in ``_idle``
        worker.wake_for_log(APPENDED_PAYLOAD)
        assert not worker.claims.tail.fresh and not worker.egress.wake.is_set()
        worker.wake_for_log("")  # an older insert function, or a listener that reconnected
        assert worker.claims.tail.fresh and worker.egress.wake.is_set()


def _payloads(listener: psycopg.Connection) -> list[str]:
    """The payloads of the notifications delivered so far (commits deliver them at once)."""
    return [n.payload for n in listener.notifies(timeout=0.5)]


@pytest.mark.postgres
def test_an_intent_newer_than_the_cycle_is_offered_again_not_passed_over(rig: tuple) -> None:
    # An intent appended after a cycle read its clock is read from the tail in that cycle, and
    # is not due yet at its ``now``. It must be offered again by the next cycle's tail, not
    # passed over like one another worker holds: that left it waiting for the projection's
    # handover (3 s after its leader was SIGKILLed, one bench run in two).
    clock, app, view, worker = rig
    for _ in range(3):  # the projection stands still (none runs): the tail is read each cycle
        clock.advance(TAIL_AFTER_STALL_SECONDS)
        worker.run_once(clock.now())
    began = clock.now()
    clock.advance(0.2)
    op_id = app.make("newer")  # Intended at began + 0.2 s
    worker.run_once(began)  # the cycle whose clock was read before the intent was appended
    assert app.get_operation(op_id).attempts == 0
    worker.run_once(clock.now())
    assert app.get_operation(op_id).attempts == 1, "the tail passed over an intent that was about to be due"


@pytest.mark.postgres
def test_an_intent_announced_during_a_pass_is_claimed_right_after_that_pass(rig: tuple) -> None:
    # Pickup latency (issue 17): a notification that arrives while the worker records outcomes
    # is acted on as soon as that pass ends (a pickup from the tail alone, at the clock's time
    # then), not after the cycle's remaining passes.
    clock, app, view, worker = rig
    announced: list = []
    record_outcomes = worker.outcomes.run_once

    def outcomes_while_an_intent_arrives(now):  # the NOTIFY comes in mid-pass
        counts = record_outcomes(now)
        if not announced:
            clock.advance(0.004)
            announced.append(app.make("arrived"))
            worker.wake_for_log()
        return counts

    due_reads: list = []
    read_due = view.due
    worker.outcomes.run_once = outcomes_while_an_intent_arrives
    view.due = lambda now, limit: due_reads.append(now) or read_due(now, limit)
    began = clock.now()
    worker.run_once()
    op = app.get_operation(announced[0])
    assert op.attempts == 1, "the announced intent waited for the next cycle"
    started = next(e for e in app.repository.event_store.get(op.id) if type(e).__name__ == "AttemptStarted")
    assert started.timestamp == clock.now() > began, "the pickup did not read the clock when it ran"
    assert due_reads == [began], "a pickup read the due rows (it reads the log's tail alone)"




@pytest.mark.postgres
def test_the_next_read_starts_past_intents_another_worker_closed(rig: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two workers end to end: each read of the tail scanned every event since the projection's
    # position again, since only this worker's own claims moved the cursor (docs/performance-history.md).
    clock, app, view, worker = rig
    ids = [app.make(f"op-{i}") for i in range(3)]
    for op_id in ids:
        theirs = app.get_operation(op_id)
        theirs.claim(now=clock.now(), worker_id="another worker", lease_seconds=30.0)
        app.save(theirs)
    starts: list[int] = []
    tail = worker.claims.tail
    real = tail.log.intents_list_open

    def spy(after: int, *args: object) -> object:
        starts.append(after)
        return real(after, *args)

    monkeypatch.setattr(tail.log, "intents_list_open", spy)
    tail.fresh = True
    assert tail.read(SLOTS, set(), clock.now()) == []
    end = select_records_last(app)
    fresh = app.make("op-new")
    tail.fresh = True
    rows = tail.read(SLOTS, set(), clock.now())
    assert [row.operation_id for row in rows] == [fresh]
    assert starts == [0, end], "the second read scanned the closed intents again"


def select_records_last(app: FakeApp) -> int:
    """The log's last position (the store's own max, read directly)."""
    recorder = app.recorder
    with recorder.datastore.get_connection() as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT max(notification_id) AS m FROM {}").format(
            sql.Identifier(recorder.datastore.schema, recorder.events_table_name)))
        return int(cur.fetchone()["m"])



@pytest.mark.postgres
def test_a_pickup_reads_and_reserves_at_once_and_leaves_out_what_another_worker_holds(rig: tuple) -> None:
    clock, app, view, _ = rig
    ids = [app.make(f"op-{i}") for i in range(3)]
    topics = topics_of([Operation.Intended])
    with driver_of(app).reservations_hold() as taken:
        first = taken.intents_reserve_open(0, 10, topics)
        assert [r[1] for r in first.records] == ids and not first.elsewhere
        with driver_of(app).reservations_hold() as other, view.reserve(ids) as by_view:
            second = other.intents_reserve_open(0, 10, topics)
            assert second.elsewhere == set(ids), "another worker's read took intents this one holds"
            assert by_view == set(), "the view's reservation and the log's must exclude each other"
            assert other.operations_reserve_current([(op_id, 1) for op_id in ids]) == set()
    # Released when the block ended: another worker may take them now.
    with driver_of(app).reservations_hold() as taken:
        assert not taken.intents_reserve_open(0, 10, topics).elsewhere
    with view.reserve(ids) as by_view:
        assert by_view == set(ids)


@pytest.mark.postgres
def test_the_due_work_pass_reserves_only_operations_that_have_not_moved_on(rig: tuple) -> None:
    # Two workers: the due-work pass of one loaded each operation the other had just claimed
    # (the view lags), only to find its lease held (docs/performance-history.md, round of 2026-12-03).
    clock, app, view, _ = rig
    ids = [app.make(f"op-{i}") for i in range(3)]
    version = app.get_operation(ids[0]).version
    theirs = app.get_operation(ids[1])
    theirs.claim(now=clock.now(), worker_id="another worker", lease_seconds=30.0)
    app.save(theirs)
    with driver_of(app).reservations_hold() as taken:
        assert taken.operations_reserve_current([(op_id, version) for op_id in ids]) == {ids[0], ids[2]}
        assert taken.operations_reserve_current([(ids[1], theirs.version)]) == {ids[1]}, "judged by its newest version"
        with view.reserve(ids) as by_view:
            assert by_view == set(), "every one it reserved is held, and none it left out"


@pytest.mark.postgres
def test_a_worker_that_lost_the_race_for_new_intents_neither_loads_nor_claims_them(rig: tuple,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    clock, app, view, worker = rig
    ids = [app.make(f"op-{i}") for i in range(3)]
    loaded: list[UUID] = []
    load = worker.claims.committer.load
    monkeypatch.setattr(worker.claims.committer, "load", lambda some: loaded.extend(some) or load(some))
    with view.reserve(ids[:2]) as held:  # another worker's pass holds two of them
        assert held == set(ids[:2])
        separate: list[object] = []
        monkeypatch.setattr(worker.claims.view, "reserve", lambda some: separate.append(some))
        worker.claims.tail.fresh = True
        counts = worker.claims.pickup(clock.now())
        monkeypatch.undo()
    assert counts.claimed == 1
    assert separate == [], "the pickup's read reserves: no reservation of its own after it"
    assert [app.get_operation(op_id).attempts for op_id in ids] == [0, 0, 1]
    assert not set(loaded) & set(ids[:2]), "the held intents were loaded only to be found held"
    # The other worker let them go without claiming them: they are offered again, not passed.
    worker.claims.tail.fresh = True
    assert worker.claims.pickup(clock.now()).claimed == 2
    assert [app.get_operation(op_id).attempts for op_id in ids] == [1, 1, 1]


@pytest.mark.postgres
def test_a_claim_whose_commit_answer_was_lost_is_sent_once_the_store_answers(rig: tuple) -> None:
    # A commit of unknown fate (issue 17): the claim and its AttemptStarted landed, the answer
    # did not. The next pass finds the store holding that very attempt and sends it, instead of
    # leaving its lease to lapse into ambiguous (worker_lost).
    clock, app, view, worker = rig
    op_id = app.make("unsure")
    worker.wake_for_log()
    with failpoints.raise_at("claim:after", OperationalError("connection lost during COMMIT")), \
            pytest.raises(OperationalError):
        worker.claims.pickup(clock.now())
    assert app.get_operation(op_id).open_attempt_id is not None, "the claim did not land"
    assert not worker.egress.in_flight
    worker.run_once(clock.now())  # the store answers again
    worker.run_once(clock.now())
    op = app.get_operation(op_id)
    assert op.execution.value == "succeeded" and op.attempts == 1, op.execution
