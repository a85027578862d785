"""History the code cannot read (issue 10 item 5), on both backends.

- Records stored under a renamed class's old topic, with the rename registered
  (``eventsourcing.utils.register_topic``), are read by the projection's catch-up and rebuild,
  by ``load_aggregates`` (the worker's bulk loads) and by the CLI.
- A record of an event type (or class version) this code lacks puts its operation on the
  attention queue once, as ``unreadable_event`` with the topic and position; every other
  operation goes on; once the code learns the event the operation comes back without a rebuild.
- ``opledger migrate`` and a worker's start refuse such a store unless told to go on.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from eventsourcing import utils as es_utils
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic, register_topic
from typer.testing import CliRunner

import ledger
import ledger.topics
from adapters.cli import app as cli
from adapters.demo.orders import OrdersApp
from ledger.config import Database, Settings
from ledger.errors import UnreadableHistoryError
from ledger.operation import Operation
from projections.history import check_readable_history
from projections.loading import load_aggregates
from projections.status import StatusProjection, StatusProjectionConfig
from projections.views import open_view
from tests.conftest import SECRET, succeed_directly


class NoteAdded(Operation.Event):
    """An event type "a newer version" writes; this code learns it mid-test (``_learn``)."""

    note: str

    def apply(self, op: Operation) -> None:
        pass


NEW_TOPIC = "ledger.operation:Operation.NoteAdded"


@pytest.fixture(autouse=True)
def _forget_registered_topics() -> Iterator[None]:
    # ``register_topic`` is process-wide: drop what a test registered, so the next test (and
    # the rest of the suite) sees the code as it is.
    before = set(es_utils._topic_cache)
    yield
    with es_utils._topic_cache_lock:
        for topic in set(es_utils._topic_cache) - before:
            del es_utils._topic_cache[topic]
    ledger.topics._memo.clear()


def _place(app: OrdersApp, n: int) -> list[UUID]:
    ids: list[UUID] = []
    for i in range(n):
        _, ops = app.place_order(customer_email=f"c{i}@example.test", amount_cents=100 + i,
                                 payments_url="http://p/pay", notify_url="http://p/n")
        ids.extend(ops)
    return ids


def _rows(view: Any) -> dict[UUID, Any]:
    return {row.operation_id: row for row in view.list(limit=10_000)}


def _execute(database: Database, app: OrdersApp, sql: str, params: tuple[Any, ...]) -> int:
    """Run ``sql`` on the events table (``{table}``) with a connection of its own."""
    if database.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(database.path)
        with conn:
            changed = conn.execute(sql.format(table="stored_events").replace("%s", "?"), params).rowcount
        conn.close()
        return changed
    import psycopg

    with psycopg.connect(database.conninfo()) as conn:
        return conn.execute(sql.format(table=f"{database.schema}.{app.name}_events"), params).rowcount


def _rename_stored(database: Database, app: OrdersApp, op_id: UUID, old: str, new: str) -> int:
    """Rewrite the stored topics of ``op_id``'s records from ``new`` to ``old`` (as if stored by
    code from before the rename)."""
    stored_id: Any = op_id.hex if database.backend == "sqlite" else op_id
    return _execute(database, app, "UPDATE {table} SET topic = %s WHERE originator_id = %s AND topic = %s",
                    (old, stored_id, new))


# The three ways a rename is registered: one event class, the aggregate class, the package.
RENAMES = {
    "event-class": ("legacy_events:Claimed", lambda: Operation.Claimed,
                    lambda topic: "legacy_events:Claimed" if topic.endswith(":Operation.Claimed") else None),
    "aggregate-class": ("legacy_ledger.ops:Operation", lambda: Operation,
                        lambda topic: topic.replace("ledger.operation:Operation.", "legacy_ledger.ops:Operation.")),
    "package": ("legacyledger", lambda: ledger,
                lambda topic: topic.replace("ledger.operation:", "legacyledger.operation:")),
}


@pytest.mark.parametrize("style", sorted(RENAMES))
def test_records_under_registered_old_topics_are_read_by_every_reader(
        orders_app: OrdersApp, migrated: Database, database_url: str, clock: Any, style: str) -> None:
    registered, target, old_topic_of = RENAMES[style]
    ids = _place(orders_app, 2)
    succeed_directly(orders_app, ids[0], clock)
    # Before the rename was registered, these records were written under the old topics.
    register_topic(registered, target())
    renamed = 0
    for op_id in ids[:2]:
        for cls in (Operation.Intended, Operation.Claimed, Operation.AttemptStarted, Operation.Succeeded):
            old = old_topic_of(get_topic(cls))
            if old is not None:
                renamed += _rename_stored(migrated, orders_app, op_id, old, get_topic(cls))
    assert renamed >= (1 if style == "event-class" else 5)

    view = open_view(migrated)
    try:
        # Catch-up.
        StatusProjection(app=orders_app, view=view).catch_up()
        rows = _rows(view)
        assert len(rows) == len(ids)
        assert (rows[ids[0]].status, rows[ids[0]].version, rows[ids[0]].attention) == ("succeeded", 4, None)
        assert rows[ids[1]].status == "pending" and rows[ids[1]].attention is None
        # Rebuild reads them too.
        before = rows
        StatusProjection(app=orders_app, view=view).rebuild()
        assert _rows(view) == before
        # The worker's bulk loads, and its view of due work.
        loaded = load_aggregates(orders_app, ids)
        assert loaded[ids[0]].status.value == "succeeded" and loaded[ids[1]].status.value == "pending"
        assert ids[1] in {row.operation_id for row in view.due(clock.now() + timedelta(days=1), 100)}
        # Nothing here is unreadable: migrate and the worker's start go on.
        assert check_readable_history(orders_app) == {}
    finally:
        view.close()

    # The CLI (read-only on SQLite while the application owns the store).
    runner = CliRunner()
    shown = runner.invoke(cli, ["ops", "show", str(ids[0]), "--database-url", database_url, "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert (data["status"], data["projection_lag"]) == ("succeeded", False)
    listed = runner.invoke(cli, ["ops", "list", "--database-url", database_url, "--json"])
    assert listed.exit_code == 0, listed.output
    assert {row["operation_id"] for row in json.loads(listed.stdout)} == {str(i) for i in ids}


def _append(app: OrdersApp, op_id: UUID, topic: str, state: dict[str, Any]) -> tuple[int, int]:
    """Store a record as a newer version of the code would; returns its version and log position."""
    version = app.get_operation(op_id).version + 1
    app.recorder.insert_events([StoredEvent(originator_id=op_id, originator_version=version, topic=topic,
                                            state=json.dumps(state).encode())])
    return version, app.recorder.max_notification_id() or 0


def _learn() -> None:
    # The code "upgrades": it now has the event type the newer version wrote.
    register_topic(NEW_TOPIC, NoteAdded)


def test_an_event_this_code_cannot_read_waits_on_the_attention_queue_until_the_code_reads_it(
        orders_app: OrdersApp, migrated: Database, database_url: str, clock: Any) -> None:
    ids = _place(orders_app, 3)
    op = orders_app.get_operation(ids[0])
    op.claim(now=clock.now(), worker_id="w", lease_seconds=30)
    orders_app.save(op)  # in flight: claimed, due again when its lease expires
    view = open_view(migrated)
    projection = StatusProjection(app=orders_app, view=view, config=StatusProjectionConfig(batch_size=3))
    try:
        projection.catch_up()
        version, position = _append(orders_app, ids[0], NEW_TOPIC,
                                    {"timestamp": clock.now().isoformat(), "note": "from a newer version"})
        succeed_directly(orders_app, ids[1], clock)  # other operations keep moving
        projection.catch_up()

        rows = _rows(view)
        bad = rows[ids[0]]
        assert (bad.attention, bad.next_due_at, bad.status, bad.version) == ("unreadable_event", None, "claimed", 2)
        detail = json.loads(bad.attention_detail)
        assert (detail["topic"], detail["version"], detail["position"]) == (NEW_TOPIC, version, position)
        assert rows[ids[1]].status == "succeeded", "the rest of the log keeps flowing"
        assert all(rows[i].attention is None for i in ids[1:])
        later = clock.now() + timedelta(days=1)
        assert ids[0] not in {row.operation_id for row in view.due(later, 100)}, "no longer due: no error loop"
        queue = view.attention()
        assert [row.operation_id for row in queue] == [ids[0]]
        # Once: more of the log, a restart, the same single mark.
        succeed_directly(orders_app, ids[2], clock)
        StatusProjection(app=orders_app, view=view).catch_up()
        assert [row.operation_id for row in view.attention()] == [ids[0]]
        assert json.loads(view.get(ids[0]).attention_detail)["position"] == position

        # The operator sees it: the attention queue and ops show, text and JSON.
        runner = CliRunner()
        queued = runner.invoke(cli, ["attention", "--database-url", database_url, "--json"])
        assert queued.exit_code == 0, queued.output
        (entry,) = json.loads(queued.stdout)
        assert entry["attention"] == "unreadable_event"
        assert entry["attention_detail"]["topic"] == NEW_TOPIC and entry["attention_detail"]["position"] == position
        text = runner.invoke(cli, ["attention", "--database-url", database_url], env={"COLUMNS": "400"})
        assert text.exit_code == 0 and "unreadable_event" in text.stdout and NEW_TOPIC in text.stdout
        shown = runner.invoke(cli, ["ops", "show", str(ids[0]), "--database-url", database_url, "--json"])
        assert shown.exit_code == 0, shown.output
        data = json.loads(shown.stdout)
        assert data["attention"] == "unreadable_event" and data["decodes_up_to_version"] == 2
        assert data["attention_detail"] == {**detail}
        text = runner.invoke(cli, ["ops", "show", str(ids[0]), "--database-url", database_url],
                             env={"COLUMNS": "400"})
        assert text.exit_code == 0 and f"position={position}" in text.stdout and NEW_TOPIC in text.stdout

        # The code learns the event: the next recheck brings the operation back, no rebuild.
        _learn()
        assert projection.recheck_unreadable() == 1
        row = view.get(ids[0])
        assert (row.attention, row.attention_detail, row.version, row.status) == (None, None, version, "claimed")
        assert row.next_due_at is not None
        assert ids[0] in {r.operation_id for r in view.due(later, 100)}, "due again: a worker reclaims it"
        assert view.attention() == []
        # And it keeps following it: its lease runs out, another worker takes it over.
        clock.advance(60)
        succeed_directly(orders_app, ids[0], clock)
        projection.catch_up()
        assert view.get(ids[0]).status == "succeeded"
    finally:
        view.close()


def test_a_restarted_projection_brings_back_what_the_code_now_reads(orders_app: OrdersApp, migrated: Database,
                                                                    clock: Any) -> None:
    ids = _place(orders_app, 1)
    view = open_view(migrated)
    try:
        StatusProjection(app=orders_app, view=view).catch_up()
        _append(orders_app, ids[0], NEW_TOPIC, {"timestamp": clock.now().isoformat(), "note": "n"})
        StatusProjection(app=orders_app, view=view).catch_up()
        assert view.get(ids[0]).attention == "unreadable_event"
        _learn()
        StatusProjection(app=orders_app, view=view).run_once()  # a restart: rechecked at start
        assert (view.get(ids[0]).attention, view.get(ids[0]).version) == (None, 2)
    finally:
        view.close()


def test_a_class_version_newer_than_the_code_is_unreadable_not_corrupt(orders_app: OrdersApp, migrated: Database,
                                                                        clock: Any) -> None:
    ids = _place(orders_app, 1)
    now = clock.now().isoformat()
    _, position = _append(orders_app, ids[0], get_topic(Operation.LeaseRenewed),
                          {"timestamp": now, "epoch": 1, "lease_expires_at": now, "class_version": 2})
    view = open_view(migrated)
    try:
        StatusProjection(app=orders_app, view=view).catch_up()
        row = view.get(ids[0])
        assert row.attention == "unreadable_event" and row.next_due_at is None
        detail = json.loads(row.attention_detail)
        assert (detail["topic"], detail["position"]) == (get_topic(Operation.LeaseRenewed), position)
        assert "class_version 2" in detail["error"]
    finally:
        view.close()


def test_migrate_and_worker_start_refuse_unreadable_topics_unless_told(migrated: Database, database_url: str,
                                                                       clock: Any, monkeypatch) -> None:
    app = OrdersApp(env=migrated.library_env(create_table=False), clock=clock)
    try:
        ids = _place(app, 1)
        _append(app, ids[0], NEW_TOPIC, {"timestamp": clock.now().isoformat(), "note": "n"})
        _append(app, ids[1], NEW_TOPIC, {"timestamp": clock.now().isoformat(), "note": "n"})
        with pytest.raises(UnreadableHistoryError) as info:
            check_readable_history(app)
        assert info.value.topics == {NEW_TOPIC: 2}
        assert check_readable_history(app, allow_unreadable=True) == {NEW_TOPIC: 2}
    finally:
        app.close()  # the CLI and the worker below own the (SQLite) store

    monkeypatch.delenv("OPLEDGER_ALLOW_UNREADABLE_EVENTS", raising=False)
    runner = CliRunner()
    refused = runner.invoke(cli, ["migrate", "--database-url", database_url])
    assert refused.exit_code == 2, refused.output
    assert NEW_TOPIC in refused.output and "2 records" in refused.output and "--allow-unreadable-events" in refused.output
    assert "Traceback" not in refused.output
    allowed = runner.invoke(cli, ["migrate", "--database-url", database_url, "--allow-unreadable-events"])
    assert allowed.exit_code == 0, allowed.output
    by_env = runner.invoke(cli, ["migrate", "--database-url", database_url],
                           env={"OPLEDGER_ALLOW_UNREADABLE_EVENTS": "1"})
    assert by_env.exit_code == 0, by_env.output

    # The worker's start: refused before anything runs; with the override it starts (and stops).
    from adapters.runtime import run_worker

    def start(**overrides: Any) -> BaseException | None:
        settings = Settings(database_url=database_url, webhook_secret=SECRET, **overrides)
        stop, failure = threading.Event(), []
        stop.set()  # stop as soon as started

        def target() -> None:  # a thread of its own: run_worker takes the signals in the main one
            try:
                run_worker(settings, stop=stop, clock=clock)
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                failure.append(exc)

        thread = threading.Thread(target=target)
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive()
        return failure[0] if failure else None

    error = start()
    assert isinstance(error, UnreadableHistoryError) and NEW_TOPIC in str(error)
    assert start(allow_unreadable_events=True) is None
