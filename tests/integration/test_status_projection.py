"""The status projection on both backends: atomic rows+position, restart safety, rebuild."""

from __future__ import annotations

from uuid import uuid4

import pytest

from adapters.demo.orders import OrdersApp
from ledger.config import Database
from projections.status import PROJECTION_NAME, StatusProjection, StatusProjectionConfig
from projections.view import NotLeaderError
from projections.views import open_view


def _place(app: OrdersApp, n: int) -> list:
    ids = []
    for i in range(n):
        _, ops = app.place_order(customer_email=f"c{i}@example.test", amount_cents=100 + i,
                                 payments_url="http://p/pay", notify_url="http://p/n")
        ids.extend(ops)
    return ids


def _drive(app: OrdersApp, op_id, clock) -> None:
    op = app.get_operation(op_id)
    epoch = op.claim(now=clock.now(), worker_id="w", lease_seconds=30)
    op.start_attempt(epoch=epoch, now=clock.now(), attempt_id=uuid4(), request_fingerprint="f")
    op.succeed(epoch=epoch, now=clock.now(), attempt_id=op.last_attempt_id)
    app.save(op)


def _rows(view) -> dict:
    return {row.operation_id: row for row in view.list(limit=10_000)}


def test_rows_and_position_commit_together(orders_app: OrdersApp, migrated: Database, monkeypatch) -> None:
    _place(orders_app, 2)
    view = open_view(migrated)
    projection = StatusProjection(app=orders_app, view=view)
    broken = dict(view.queries)
    broken["upsert_tracking"] = "INSERT INTO no_such_table VALUES (1)"
    monkeypatch.setattr(view, "queries", broken)
    with pytest.raises(Exception):
        projection.run_once()
    monkeypatch.undo()
    assert view.list() == [] and view.position(PROJECTION_NAME, orders_app.name) == 0
    assert projection.catch_up() == 4
    assert view.counts() == {"pending": 4}
    view.close()


def test_stopping_mid_stream_never_double_counts_or_skips(orders_app: OrdersApp, migrated: Database, clock) -> None:
    ids = _place(orders_app, 5)
    for op_id in ids[:4]:
        _drive(orders_app, op_id, clock)
    view = open_view(migrated)
    first = StatusProjection(app=orders_app, view=view, config=StatusProjectionConfig(batch_size=3))
    assert first.run_once() == 3  # stop after one batch, as if the process died
    second = StatusProjection(app=orders_app, view=view, config=StatusProjectionConfig(batch_size=4))
    total = 3 + second.catch_up()
    assert total == 10 + 4 * 3  # 10 intents, 3 events for each driven operation
    counts = view.counts()
    assert counts == {"pending": 6, "succeeded": 4}
    assert second.catch_up() == 0
    view.close()


def test_rebuild_from_zero_gives_identical_rows(orders_app: OrdersApp, migrated: Database, clock) -> None:
    ids = _place(orders_app, 4)
    for op_id in ids[::2]:
        _drive(orders_app, op_id, clock)
    view = open_view(migrated)
    projection = StatusProjection(app=orders_app, view=view, config=StatusProjectionConfig(batch_size=5))
    projection.catch_up()
    before = _rows(view)
    position = view.position(PROJECTION_NAME, orders_app.name)
    fresh = StatusProjection(app=orders_app, view=view, config=StatusProjectionConfig(batch_size=2, cache_size=1))
    assert fresh.rebuild() == position - 4  # every notification but the four Placed events
    assert _rows(view) == before
    assert view.position(PROJECTION_NAME, orders_app.name) == position
    # A second rebuild works too (index names alternate) and the projection keeps following.
    assert fresh.rebuild() > 0
    _place(orders_app, 1)
    assert projection.catch_up() == 2
    assert len(_rows(view)) == len(before) + 2
    view.close()


def _corrupt(database: Database, app: OrdersApp, op_id, version: int) -> None:
    if database.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(database.path)
        with conn:
            changed = conn.execute("UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
                                   (b"{not json", op_id.hex, version)).rowcount
        conn.close()
    else:
        import psycopg

        with psycopg.connect(database.conninfo()) as conn:
            changed = conn.execute(
                f"UPDATE {database.schema}.{app.name}_events SET state = %s WHERE originator_id = %s "
                "AND originator_version = %s", (b"{not json", op_id, version)).rowcount
    assert changed == 1


def test_a_corrupt_record_quarantines_its_operation_only(orders_app: OrdersApp, migrated: Database, clock) -> None:
    ids = _place(orders_app, 2)
    for op_id in ids:
        _drive(orders_app, op_id, clock)
    _corrupt(migrated, orders_app, ids[0], 3)  # its AttemptStarted
    view = open_view(migrated)
    projection = StatusProjection(app=orders_app, view=view, config=StatusProjectionConfig(batch_size=3))
    projection.catch_up()
    rows = _rows(view)
    assert rows[ids[0]].attention == "corrupt_record" and rows[ids[0]].next_due_at is None
    assert all(rows[i].status == "succeeded" for i in ids[1:]), "the rest of the log keeps flowing"
    assert projection.quarantined == {ids[0]: 3}
    # A fresh projection (a restart) finds it again from the events after the corrupt one.
    fresh = StatusProjection(app=orders_app, view=view)
    fresh.rebuild()
    assert _rows(view)[ids[0]].attention == "corrupt_record"
    view.close()


def test_offered_states_spare_the_reload_and_stay_detached(orders_app: OrdersApp, migrated: Database, clock,
                                                            monkeypatch) -> None:
    ids = _place(orders_app, 3)
    view = open_view(migrated)
    projection = StatusProjection(app=orders_app, view=view)
    projection.catch_up()  # the Intended events
    # A worker in this process commits, then offers what it committed; a fresh projection (empty
    # cache) then folds the log onto the offered states without reading any aggregate.
    ops = [orders_app.get_operation(op_id) for op_id in ids]
    for op in ops:
        epoch = op.claim(now=clock.now(), worker_id="w", lease_seconds=30)
        op.start_attempt(epoch=epoch, now=clock.now(), attempt_id=uuid4(), request_fingerprint="f")
    orders_app.save(*ops)
    fresh = StatusProjection(app=orders_app, view=view)
    fresh.offer(ops)
    # The worker goes on changing its own instances, uncommitted: the offered copies must not move.
    for op in ops:
        op.succeed(epoch=op.epoch, now=clock.now(), attempt_id=op.last_attempt_id)

    def no_reads(*args, **kwargs):
        raise AssertionError("the projection reloaded an operation it was offered")

    monkeypatch.setattr("projections.status.load_aggregates", no_reads)
    monkeypatch.setattr(orders_app.repository, "get", no_reads)
    assert fresh.catch_up() == 2 * len(ids)
    assert view.counts() == {"dispatching": len(ids)}
    view.close()


def test_a_failed_write_mid_catch_up_leaves_a_committed_prefix(orders_app: OrdersApp, migrated: Database, clock,
                                                             monkeypatch) -> None:
    # catch_up folds the next batch while the previous one is written: when a write fails, what
    # is committed is the batches before it, the error reaches the caller, and a later catch_up
    # (whose cache was dropped) ends with the same rows as an undisturbed projection.
    ids = _place(orders_app, 6)
    for op_id in ids[::3]:
        _drive(orders_app, op_id, clock)
    view = open_view(migrated)
    projection = StatusProjection(app=orders_app, view=view, config=StatusProjectionConfig(batch_size=3))
    real_write, calls = view.write, []

    def failing_write(rows, **kwargs):
        calls.append(kwargs["position"])
        if len(calls) == 3:
            raise RuntimeError("disk full")
        real_write(rows, **kwargs)

    monkeypatch.setattr(view, "write", failing_write)
    with pytest.raises(RuntimeError, match="disk full"):
        projection.catch_up()
    assert view.position(PROJECTION_NAME, orders_app.name) == calls[1]  # two batches committed
    monkeypatch.setattr(view, "write", real_write)
    assert projection.catch_up() > 0
    caught_up = _rows(view)
    fresh = StatusProjection(app=orders_app, view=view)
    fresh.rebuild()
    assert _rows(view) == caught_up and len(caught_up) == 12
    view.close()


def test_catch_up_stops_writing_when_leadership_is_lost(orders_app: OrdersApp, migrated: Database,
                                                        monkeypatch) -> None:
    # Every write re-checks the lease in its transaction; a lease lost before the second write
    # ends the catch-up with nothing more written (PostgreSQL has leases; the check is the same
    # code on SQLite, here made to refuse as PostgreSQL's check_lease would).
    _place(orders_app, 5)
    view = open_view(migrated)
    projection = StatusProjection(app=orders_app, view=view, config=StatusProjectionConfig(batch_size=2))
    monkeypatch.setattr(projection, "lease", object())
    monkeypatch.setattr(view, "lead", lambda lease, ttl: True)
    real_write, writes = view.write, iter([True, False])

    def write(rows, **kw):
        if not next(writes):
            raise NotLeaderError("lease lost")
        real_write(rows, **{**kw, "lease": None})

    monkeypatch.setattr(view, "write", write)
    assert projection.catch_up() == 2  # what was committed before the lease was lost
    assert view.position(PROJECTION_NAME, orders_app.name) == 3  # the first batch: Placed, two intents
    assert projection._cache == {}
    assert not projection._following  # it stopped following
    view.close()


def test_the_leader_renews_its_lease_once_a_third_has_passed_not_per_batch(
        orders_app: OrdersApp, migrated: Database, monkeypatch) -> None:
    view = open_view(migrated)
    projection = StatusProjection(app=orders_app, view=view, config=StatusProjectionConfig(lease_seconds=3.0))
    calls: list[float] = []
    answers = iter([True, True, False])
    now = [100.0]
    monkeypatch.setattr(projection, "lease", object())
    monkeypatch.setattr(view, "lead", lambda lease, ttl: calls.append(now[0]) or next(answers))
    monkeypatch.setattr("projections.status.time.monotonic", lambda: now[0])
    assert projection.is_leader() and projection.is_leader()
    now[0] += 0.9  # under a third of 3 s: no round trip
    assert projection.is_leader() and calls == [100.0]
    now[0] += 0.2  # past a third: renewed
    assert projection.is_leader() and len(calls) == 2
    now[0] += 1.1  # renewal refused: not the leader, and asked again the next time
    assert not projection.is_leader() and len(calls) == 3
    view.close()


def test_corrupt_marks_commit_with_their_batch(orders_app: OrdersApp, migrated: Database, clock, monkeypatch) -> None:
    # The mark of an operation quarantined in a batch (its row written by an earlier batch) is
    # part of that batch's transaction: if marking fails, neither the batch nor its position
    # commit, and the retry marks it. The operation then waits on the attention queue, not due.
    ids = _place(orders_app, 2)
    _drive(orders_app, ids[0], clock)
    _corrupt(migrated, orders_app, ids[0], 2)  # its Claimed: the rest of it cannot be folded
    view = open_view(migrated)
    projection = StatusProjection(app=orders_app, view=view, config=StatusProjectionConfig(batch_size=4))
    broken = dict(view.queries)
    broken["mark_attention"] = "UPDATE no_such_table SET x = 1"
    monkeypatch.setattr(view, "queries", broken)
    with pytest.raises(Exception):
        projection.catch_up()
    first_batch = view.position(PROJECTION_NAME, orders_app.name)
    assert view.get(ids[0]).execution == "pending" and view.get(ids[0]).attention is None
    monkeypatch.undo()
    assert projection.catch_up() == 3
    assert view.position(PROJECTION_NAME, orders_app.name) > first_batch
    row = view.get(ids[0])
    assert (row.version, row.attention, row.next_due_at) == (1, "corrupt_record", None)
    assert [r.operation_id for r in view.attention()] == [ids[0]]
    view.close()


def test_catch_up_returns_soon_after_stop(orders_app: OrdersApp, migrated: Database) -> None:
    # The follow loop hands its stop event to catch_up: a backlog does not hold up a shutdown.
    import threading

    _place(orders_app, 10)
    view = open_view(migrated)
    projection = StatusProjection(app=orders_app, view=view, config=StatusProjectionConfig(batch_size=2))
    stop = threading.Event()
    stop.set()
    assert projection.catch_up(stop) == 2  # the batch already being written, then nothing more
    assert view.position(PROJECTION_NAME, orders_app.name) == 3
    assert projection.catch_up() == 18  # the rest, once asked without a stop
    view.close()


def test_a_host_mapper_without_decode_record_still_projects(migrated: Database, clock) -> None:
    # A host application may construct its own mapper; reads then go through its
    # to_domain_event, and a LedgerMapper subclass that overrides to_domain_event is used too.
    from ledger.codec import LedgerMapper
    from projections.loading import record_decoder

    calls = []

    class CountingMapper(LedgerMapper):
        def to_domain_event(self, stored_event):
            calls.append(stored_event.originator_version)
            return super().to_domain_event(stored_event)

    class CountingApp(OrdersApp):
        name = OrdersApp.name  # the same tables
        def construct_mapper(self):
            return self.factory.mapper(transcoder=self.construct_transcoder(), mapper_class=CountingMapper)

    app = CountingApp(env=migrated.library_env(create_table=False), clock=clock)
    assert record_decoder(app).__name__ == "via_stored_event"
    ids = _place(app, 2)
    view = open_view(migrated)
    assert StatusProjection(app=app, view=view).catch_up() == 4
    assert len(calls) == 4 and {r.operation_id for r in view.list()} == set(ids)
    view.close()


def test_ops_timeline_shows_a_damaged_operation_up_to_its_damage(orders_app: OrdersApp, migrated: Database,
                                                                 database_url: str, clock) -> None:
    # docs/operations.md: the timeline shows every event up to the damaged one, then where it stops.
    import json

    from typer.testing import CliRunner

    from adapters.cli.app import app as cli

    ids = _place(orders_app, 1)
    _drive(orders_app, ids[0], clock)
    _corrupt(migrated, orders_app, ids[0], 3)
    result = CliRunner().invoke(cli, ["ops", "timeline", str(ids[0]), "--database-url", database_url, "--json"])
    assert result.exit_code == 0, result.output
    entries = json.loads(result.output)
    assert [e["event"] for e in entries] == ["Intended", "Claimed", "CORRUPT"]
    assert entries[-1]["version"] == 3


def test_a_host_mapper_quarantines_a_corrupt_record_like_the_ledger_mapper(migrated: Database, clock) -> None:
    # With the library's own Mapper, a ledger record that does not decode still sets aside only
    # its operation: the rest of the log is projected and the operation waits for an operator.
    from eventsourcing.persistence import Mapper

    class PlainApp(OrdersApp):
        name = OrdersApp.name  # the same tables

        def construct_mapper(self):
            return self.factory.mapper(transcoder=self.construct_transcoder(), mapper_class=Mapper)

    app = PlainApp(env=migrated.library_env(create_table=False), clock=clock)
    ids = _place(app, 3)
    _drive(app, ids[0], clock)
    _corrupt(migrated, app, ids[0], 3)
    view = open_view(migrated)
    projection = StatusProjection(app=app, view=view, config=StatusProjectionConfig(batch_size=4))
    assert projection.catch_up() == 9
    assert set(projection.quarantined) == {ids[0]}
    assert len(view.list()) == 6 and [r.operation_id for r in view.attention()] == [ids[0]]
    view.close()
    app.close()
