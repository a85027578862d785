"""One bad operation never stops a worker (issue 10, item 3): each case below brings one hostile
operation among 50 good ones in flight. The worker must keep running, settle all 50, and put the
bad one on the attention queue with its reason. Both backends; the worker runs in this process
on a fake clock, its egress inline, keeping the status projection itself."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC
from uuid import UUID

import pytest

from adapters.fake import FakeAdapter
from executors.runtime import Worker, WorkerConfig
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.egress import EgressRequest
from ledger.outcomes import Outcome, Succeeded
from projections.status import StatusProjection
from projections.views import open_view
from tests.apps import FakeApp

OTHERS = 50
BAD = "https://partner.test/bad"
UTC = UTC


def _run(app: FakeApp, database: Database, clock: FakeClock, script: Callable[[EgressRequest], Outcome],
         others: list[UUID], bad: UUID, cycles: int = 60) -> dict:
    """Run a worker until every good operation is settled and the bad one is settled or on the
    attention queue (or ``cycles`` run out); return the bad one's status row and the queue."""
    view = open_view(database)
    projection = StatusProjection(app=app, view=view)
    worker = Worker(app=app, view=view, adapters={"fake": FakeAdapter(script=script)}, clock=clock,
                    config=WorkerConfig(worker_id="iso", egress_slots=8, inline_egress=True),
                    rng=random.Random(7), projection=projection, on_committed=projection.offer)
    try:
        for _ in range(cycles):
            worker.run_once()
            clock.advance(1)
            rows = [view.get(op_id) for op_id in others]
            last = view.get(bad)
            bad_done = last is not None and (last.attention is not None or last.status == "settled")
            if bad_done and all(row is not None and row.status == "settled" for row in rows):
                break
        projection.run_once()
        rows = [view.get(op_id) for op_id in others]
        assert [r.status for r in rows if r is None or r.status != "settled"] == [], "good operations left behind"
        bad_row = view.get(bad)
        attention = {row.operation_id: row.attention for row in view.attention()}
        return {"row": bad_row, "attention": attention}
    finally:
        worker.close()
        view.close()


def _ok(request: EgressRequest) -> Outcome:
    return Succeeded(status_code=200, remote_id=f"ch_{request.operation_id.hex[:8]}")


def _rewrite_state(database: Database, app: FakeApp, op_id: UUID, version: int,
                   change: Callable[[bytes], bytes], topic: str | None = None) -> None:
    """Rewrite one stored record of ``op_id`` in place (as an older or newer code version, or a
    damaged disk, might have left it); ``version`` past the last appends a new record instead."""
    if database.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(database.path)
        with conn:
            row = conn.execute("SELECT state, topic FROM stored_events WHERE originator_id = ? "
                               "AND originator_version = ?", (op_id.hex, min(version, 1))).fetchone()
            if topic is None:
                conn.execute("UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
                             (change(bytes(row[0])), op_id.hex, version))
            else:
                conn.execute("INSERT INTO stored_events (originator_id, originator_version, topic, state) "
                             "VALUES (?, ?, ?, ?)", (op_id.hex, version, topic, change(b"")))
        conn.close()
        return
    import psycopg

    table = f"{database.schema}.{app.name}_events"
    with psycopg.connect(database.conninfo()) as conn:
        if topic is None:
            (state,) = conn.execute(f"SELECT state FROM {table} WHERE originator_id = %s AND originator_version = %s",
                                    (op_id, version)).fetchone()
            conn.execute(f"UPDATE {table} SET state = %s WHERE originator_id = %s AND originator_version = %s",
                         (change(bytes(state)), op_id, version))
        else:
            conn.execute(f"INSERT INTO {table} (originator_id, originator_version, topic, state) "
                         "VALUES (%s, %s, %s, %s)", (op_id, version, topic, change(b"")))


def _make(app: FakeApp, bad_label: str = "bad") -> tuple[list[UUID], UUID]:
    others = [app.make(f"ok-{i}") for i in range(OTHERS)]
    return others, app.make(bad_label, target=BAD)


def test_an_outcome_that_cannot_be_stored_makes_that_operation_ambiguous(app, fake_db, clock) -> None:
    others, bad = _make(app)

    def script(request: EgressRequest) -> Outcome:
        # text where a status code belongs: the codec refuses to store it as received
        return Succeeded(status_code="two hundred" if request.target == BAD else 200)  # type: ignore[arg-type]

    seen = _run(app, fake_db, clock, script, others, bad)
    assert seen["row"].execution == "ambiguous" and seen["row"].ambiguity_reason == "outcome_unstorable"
    assert seen["attention"] == {bad: "ambiguous"}
    assert "could not be stored" in app.get_operation(bad).excerpt


def test_a_lone_surrogate_in_a_provider_id_is_stored_escaped(app, fake_db, clock) -> None:
    others, bad = _make(app)

    def script(request: EgressRequest) -> Outcome:
        return Succeeded(status_code=200, remote_id="\ud800-ch_1" if request.target == BAD else "ch_ok")

    seen = _run(app, fake_db, clock, script, others, bad)
    assert seen["row"].status == "settled" and seen["attention"] == {}
    remote_id = app.get_operation(bad).remote_id
    assert remote_id.startswith("\\ud800-ch_1") and "sha256:" in remote_id


@pytest.mark.parametrize(("label", "error"), [("boom", "failed on purpose"), ("exit", "SystemExit: 3")])
def test_a_raising_settlement_method_blocks_that_settlement_only(app, fake_db, clock, label: str, error: str) -> None:
    others, bad = _make(app, bad_label=label)
    seen = _run(app, fake_db, clock, _ok, others, bad)
    assert seen["row"].status == "settlement_blocked"
    assert seen["attention"] == {bad: "settlement_blocked"}
    assert error in app.get_operation(bad).settlement_error


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() of this exception fails")


@pytest.mark.parametrize("raised", [SystemExit(4), _Unprintable(), None, "ok"],
                         ids=["SystemExit", "unprintable", "returns None", "returns text"])
def test_an_adapter_that_raises_anything_costs_that_operation_its_attempts_only(app, fake_db, clock, raised) -> None:
    others, bad = _make(app)

    def script(request: EgressRequest) -> Outcome:
        if request.target == BAD:
            if isinstance(raised, BaseException):
                raise raised
            return raised  # type: ignore[return-value]
        return _ok(request)

    seen = _run(app, fake_db, clock, script, others, bad)
    # idempotent: each adapter_error is retried with the same key until the budget is used
    assert seen["row"].execution == "ambiguous" and seen["attention"] == {bad: "budget_exhausted"}


def test_a_retry_after_that_cannot_be_scheduled_fails_the_operation_once(app, fake_db, clock) -> None:
    from ledger.outcomes import Failed, FailureCategory

    others, bad = _make(app)
    adapter_calls: list[EgressRequest] = []

    def script(request: EgressRequest) -> Outcome:
        if request.target == BAD:
            adapter_calls.append(request)
            return Failed(FailureCategory.THROTTLED, retryable=True, egress=False, status_code=503,
                          retry_after=float("inf"))
        return _ok(request)

    seen = _run(app, fake_db, clock, script, others, bad)
    assert (seen["row"].execution, seen["row"].status, len(adapter_calls)) == ("failed", "settled", 1)


def test_a_corrupt_record_is_quarantined_and_the_rest_goes_on(app, fake_db, clock) -> None:
    others, bad = _make(app)
    op = app.get_operation(bad)
    op.request_cancel(now=clock.now(), principal="test")
    app.save(op)
    _rewrite_state(fake_db, app, bad, 2, lambda state: b"{not json")  # its CancelRequested
    seen = _run(app, fake_db, clock, _ok, others, bad)
    assert seen["attention"] == {bad: "corrupt_record"}
    assert seen["row"].next_due_at is None and "position" in (seen["row"].attention_detail or "")


def test_an_event_this_code_cannot_read_sets_that_operation_aside(app, fake_db, clock) -> None:
    others, bad = _make(app)
    _rewrite_state(fake_db, app, bad, 2, lambda state: b'{"timestamp":"2026-01-01T00:00:01Z"}',
                   topic="ledger.operation:Operation.FromANewerVersion")
    seen = _run(app, fake_db, clock, _ok, others, bad)
    assert seen["attention"] == {bad: "unreadable_event"}
    assert "FromANewerVersion" in seen["row"].attention_detail


def test_a_year_9999_intent_is_shown_not_raised(app, fake_db, clock) -> None:
    others, bad = _make(app)
    # As code without today's intent checks could have stored it: the intent's time in year 9999.
    _rewrite_state(fake_db, app, bad, 1, lambda state: state.replace(b'"timestamp":"2026-01-01T00:00:00',
                                                                     b'"timestamp":"9999-12-31T23:58:00'))
    seen = _run(app, fake_db, clock, _ok, others, bad)
    assert seen["row"].execution == "pending" and seen["row"].next_due_at is not None
    assert seen["attention"] == {bad: "unrepresentable_time"}


def test_an_operation_whose_records_went_missing_is_quarantined_not_raised(app, fake_db, clock) -> None:
    from ledger.errors import CorruptRecordError

    others, bad = _make(app)
    op = app.get_operation(bad)
    op.request_cancel(now=clock.now(), principal="test")
    app.save(op)
    # As a damaged or hand-edited store might be: the operation's Intended is gone.
    if fake_db.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(fake_db.path)
        with conn:
            conn.execute("DELETE FROM stored_events WHERE originator_id = ? AND originator_version = 1", (bad.hex,))
        conn.close()
    else:
        import psycopg

        with psycopg.connect(fake_db.conninfo()) as conn:
            conn.execute(f"DELETE FROM {fake_db.schema}.{app.name}_events WHERE originator_id = %s "
                         "AND originator_version = 1", (bad,))
    with pytest.raises(CorruptRecordError, match="missing"):
        app.get_operation(bad)
    _run(app, fake_db, clock, _ok, others, bad)
    view = open_view(fake_db)
    try:
        projection = StatusProjection(app=app, view=view)
        projection.rebuild()  # one damaged operation never blocks the store's rebuild
        assert all(view.get(op_id).status == "settled" for op_id in others)
        assert bad in projection.quarantined
    finally:
        view.close()
