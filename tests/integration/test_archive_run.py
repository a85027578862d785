"""``opledger archive`` (issue 29 items 2 and 4), on both backends: only closed operations are
selected, a run writes a segment that ``archive verify`` accepts and removes what it holds from
the hot store, an archived id is refused by ``intend``, a rerun archives nothing twice, and the
status totals and metrics stay as they were."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import pytest
from typer.testing import CliRunner

from adapters import archive_run
from adapters.archive_run import ArchiveReport, run_archive
from adapters.cli.app import app as cli
from adapters.demo.orders import Order, OrdersApp
from ledger.archives import read_statuses, segments
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.errors import CorruptRecordError, OperationArchivedError
from migrations.drivers import archives_of, driver_of, memory_env
from migrations.drivers.memory import MemoryDriver
from projections import MemoryStatusStore, MetricsProjection, MetricsStore, StatusProjection
from projections.view import StatusView
from tests.archive_desk import archive_cli as _archive
from tests.archive_desk import closed_orders


def _store(app: OrdersApp, clock: FakeClock, view: StatusView) -> tuple[list[UUID], list[UUID], UUID]:
    """One order's payment, notification and fulfilment closed, another's two pending."""
    return closed_orders(app, clock, view, fulfil=True)


def test_closed_operations_are_archived_verified_and_removed_and_a_rerun_archives_none_twice(
        orders_app: OrdersApp, clock: FakeClock, view: StatusView, migrated: Database, tmp_path: Path) -> None:
    closed, still_open, _ = _store(orders_app, clock, view)
    out = tmp_path / "archive"

    dry = _archive(migrated, out, "--dry-run")
    assert (dry["dry_run"], dry["operations"], dry["segments"]) == (True, len(closed), [])
    assert not out.exists()

    done = _archive(migrated, out)
    assert (done["operations"], done["segments"], done["removed"]) == (len(closed), [1], len(closed))
    [(_, segment)] = segments(out)
    assert {s["id"] for s in read_statuses(segment)} == {str(i) for i in closed}
    assert {s["status"] for s in read_statuses(segment)} == {"settled"}
    for op_id in closed:  # gone from the hot store: records and status row
        assert not orders_app.recorder.select_events(op_id)
        assert view.get(op_id) is None
    for op_id in still_open:
        assert orders_app.recorder.select_events(op_id) and view.get(op_id) is not None
    lookup = archives_of(orders_app).archive_lookup([*closed, *still_open])
    assert lookup == {op_id: (1, "settled") for op_id in closed}

    verified = CliRunner().invoke(cli, ["archive", "verify", str(out)])
    assert verified.exit_code == 0 and "1 segment," in verified.stdout, verified.output

    again = _archive(migrated, out)
    assert (again["operations"], again["segments"], again["removed"]) == (0, [], 0)
    assert len(segments(out)) == 1


def test_an_archived_id_is_refused_by_intend(orders_app: OrdersApp, clock: FakeClock, view: StatusView,
                                             migrated: Database, tmp_path: Path) -> None:
    _, _, order_id = _store(orders_app, clock, view)
    _archive(migrated, tmp_path / "archive")
    # A host replaying old input: the order as it was before fulfilment, fulfilled again.
    replay: Order = orders_app.repository.get(order_id, version=_version_before_fulfilment(orders_app, order_id))
    replay.request_fulfilment()
    with pytest.raises(OperationArchivedError, match="seg-000001"):
        orders_app.intend(replay, "orders.fulfil", target="http://p/f", payload={"order_id": str(order_id), "items": 1})


def test_a_store_held_in_memory_archives_as_the_databases_do(clock: FakeClock, tmp_path: Path) -> None:
    # Issue 28 item 4: the memory driver's archives, a whole run and intend's refusal.
    app = OrdersApp(env=memory_env(), clock=clock)
    tables = MemoryStatusStore(clock=clock)
    driver = driver_of(app)
    assert isinstance(driver, MemoryDriver) and archives_of(app) is driver
    driver.status = tables  # the status rows beside the log, as one database holds both
    view, out = tables.open_view(), tmp_path / "archive"
    try:
        closed, still_open, order_id = _store(app, clock, view)
        counts = view.counts()
        report = _run(app, view, out)
        assert (report.operations, report.segments, report.removed) == (len(closed), [1], len(closed))
        assert not any(app.recorder.select_events(op_id) or view.get(op_id) for op_id in closed)
        assert all(app.recorder.select_events(op_id) and view.get(op_id) for op_id in still_open)
        assert view.counts() == counts, "archived operations count as they did"
        assert CliRunner().invoke(cli, ["archive", "verify", str(out)]).exit_code == 0
        replay: Order = app.repository.get(order_id, version=_version_before_fulfilment(app, order_id))
        replay.request_fulfilment()
        with pytest.raises(OperationArchivedError, match="seg-000001"):
            app.intend(replay, "orders.fulfil", target="http://p/f", payload={"order_id": str(order_id), "items": 1})
        assert _run(app, view, out).operations == 0, "a rerun archives none twice"
    finally:
        app.close()


def _version_before_fulfilment(app: OrdersApp, order_id: UUID) -> int:
    events = list(app.repository.event_store.get(order_id))
    return next(e.originator_version for e in events if type(e).__name__ == "FulfilmentRequested") - 1


def test_nothing_is_selected_without_a_policy_or_before(orders_app: OrdersApp, clock: FakeClock, view: StatusView,
                                                        migrated: Database, tmp_path: Path) -> None:
    _store(orders_app, clock, view)
    result = CliRunner().invoke(cli, ["archive", "--out", str(tmp_path / "a"), "--database-url", migrated.url()],
                                env={"OPLEDGER_APP": "adapters.demo.orders:OrdersApp", "OPLEDGER_RETENTION": ""})
    assert result.exit_code == 2 and "OPLEDGER_RETENTION" in result.output


def test_status_totals_and_metrics_do_not_go_backwards(orders_app: OrdersApp, clock: FakeClock, view: StatusView,
                                                      migrated: Database, tmp_path: Path) -> None:
    closed, still_open, _ = _store(orders_app, clock, view)
    metrics = MetricsStore(view)
    MetricsProjection(app=orders_app, store=metrics).catch_up()
    counts, counters, gauges = view.counts(), metrics.totals(), metrics.gauges().by_status
    assert counts == {"settled": len(closed), "pending": len(still_open)}

    _archive(migrated, tmp_path / "archive")
    MetricsProjection(app=orders_app, store=metrics).catch_up()
    assert all(view.get(op_id) is None for op_id in closed)  # gone from the hot store, still counted
    assert (view.counts(), metrics.totals(), metrics.gauges().by_status) == (counts, counters, gauges)

    _archive(migrated, tmp_path / "archive")  # a rerun adds nothing twice
    assert (view.counts(), metrics.gauges().by_status) == (counts, gauges)
    [segment] = archives_of(orders_app).archive_segments()
    assert json.loads(segment.summary)["status"] == {"settled": len(closed)}

    # A rebuild from the log, which no longer holds the archived records, starts from what the
    # segment carried forward for them: the same counters as before archiving.
    assert counters[("opledger_settled", "payments.charge", "default", "idempotent", "")] > 0
    MetricsProjection(app=orders_app, store=metrics).rebuild()
    assert metrics.totals() == counters
    assert (view.counts(), metrics.gauges().by_status) == (counts, gauges)


@pytest.mark.parametrize("command", ["show", "timeline"])
def test_ops_show_and_timeline_of_an_archived_id_name_its_segment(
        command: str, orders_app: OrdersApp, clock: FakeClock, view: StatusView, migrated: Database,
        tmp_path: Path) -> None:
    closed, _, _ = _store(orders_app, clock, view)
    _archive(migrated, tmp_path / "archive")
    result = CliRunner().invoke(cli, ["ops", command, str(closed[0]), "--database-url", migrated.url()],
                                env={"OPLEDGER_APP": "adapters.demo.orders:OrdersApp"})
    assert result.exit_code == 2, result.output
    assert "archived (settled) in segment seg-000001" in result.output, result.output
    assert "Traceback" not in result.output


PROVENANCE = {"identity": "test", "schema": 6, "codec": 1, "version": "0", "commit": ""}


def _run(app: OrdersApp, view: StatusView, out: Path) -> ArchiveReport:
    now = datetime.now(UTC)
    return run_archive(app, view, archives_of(app), out, now=now, limits={name: now for name in
                       ("payments.charge", "notifications.send", "orders.fulfil")}, provenance=PROVENANCE)


class Killed(Exception):
    """Stands for a SIGKILL at a commit boundary."""


def test_a_run_killed_before_recording_or_mid_removal_is_completed_by_the_next(
        orders_app: OrdersApp, clock: FakeClock, view: StatusView, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    closed, _, _ = _store(orders_app, clock, view)
    metrics = MetricsStore(view)
    MetricsProjection(app=orders_app, store=metrics).catch_up()
    counters = metrics.totals()
    out = tmp_path / "archive"
    archives = archives_of(orders_app)
    with monkeypatch.context() as patch:  # killed after the segment was written and verified
        patch.setattr(type(archives), "archive_record", lambda *a, **k: (_ for _ in ()).throw(Killed()))
        with pytest.raises(Killed):
            _run(orders_app, view, out)
    assert len(segments(out)) == 1 and archives.archive_segments() == []
    assert all(orders_app.recorder.select_events(op_id) for op_id in closed)  # nothing removed unrecorded

    removals = []
    original = type(archives).archive_remove

    def remove_once(self: object, batch: list) -> int:
        if removals:
            raise Killed()
        removals.append(batch)
        return original(self, batch)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:  # the next run records it, then is killed mid-removal
        patch.setattr("adapters.archive_run.REMOVE_BATCH", 1)
        patch.setattr(type(archives), "archive_remove", remove_once)
        with pytest.raises(Killed):
            _run(orders_app, view, out)
    assert [s.segment for s in archives.archive_segments()] == [1]
    assert sum(1 for op_id in closed if orders_app.recorder.select_events(op_id)) == len(closed) - 1

    report = _run(orders_app, view, out)
    assert (report.segments, report.operations, report.removed) == ([], 0, len(closed) - 1)
    # The segment the recovering run recorded (from its files) carried the metrics forward too.
    MetricsProjection(app=orders_app, store=metrics).rebuild()
    assert metrics.totals() == counters
    assert not any(orders_app.recorder.select_events(op_id) for op_id in closed)
    assert len(segments(out)) == 1 and set(archives.archive_lookup(closed)) == set(closed)
    assert CliRunner().invoke(cli, ["archive", "verify", str(out)]).exit_code == 0


def test_a_record_after_archiving_keeps_the_operation_whole_and_on_the_attention_queue(
        orders_app: OrdersApp, clock: FakeClock, view: StatusView, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    closed, _, _ = _store(orders_app, clock, view)
    out = tmp_path / "archive"
    with monkeypatch.context() as patch:  # recorded, then killed before any removal
        patch.setattr(type(archives_of(orders_app)), "archive_remove", lambda *a, **k: (_ for _ in ()).throw(Killed()))
        with pytest.raises(Killed):
            _run(orders_app, view, out)
    late = orders_app.get_operation(closed[0])  # a provider's late callback contradicts the outcome
    assert late.receive_callback(now=clock.now(), callback_id="late-1", outcome="failed",
                                 attempt_id=late.last_attempt_id)
    orders_app.save(late)

    report = _run(orders_app, view, out)
    assert report.removed == len(closed) - 1
    stored = [r.originator_version for r in orders_app.recorder.select_events(closed[0])]
    assert stored == list(range(1, late.version + 1)), "kept whole, never cut"
    assert not any(orders_app.recorder.select_events(op_id) for op_id in closed[1:])
    StatusProjection(app=orders_app, view=view).catch_up()
    row = view.get(closed[0])
    assert row is not None and row.attention == "late_observation"
    assert _run(orders_app, view, out).removed == 0, "and left alone by later runs"


def test_doctor_counts_the_records_archived_out_of_the_log(orders_app: OrdersApp, clock: FakeClock, view: StatusView,
                                                           migrated: Database, tmp_path: Path) -> None:
    _store(orders_app, clock, view)
    _archive(migrated, tmp_path / "archive")
    result = CliRunner().invoke(cli, ["doctor", "--json", "--database-url", migrated.url()],
                                env={"OPLEDGER_APP": "adapters.demo.orders:OrdersApp"})
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["log"]["status"] == "ok", checks["log"]
    assert checks["drift"]["status"] == "ok", checks["drift"]


def test_an_operation_whose_record_does_not_decode_stays_and_the_rest_are_archived(
        orders_app: OrdersApp, clock: FakeClock, view: StatusView, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The status projection puts such an operation on the attention queue, so it is not selected;
    # one that turns unreadable after it was selected (a newer version's record, a damaged one)
    # is left whole for a later run and counts nothing, and the segment holds the others.
    closed, _, _ = _store(orders_app, clock, view)
    unreadable = closed[0]
    decode = archive_run.decoded_events

    def decoded_events(app: OrdersApp, records: list) -> list:
        if records[0].originator_id == unreadable:
            raise CorruptRecordError(unreadable, 2, "?", "planted")
        return decode(app, records)

    monkeypatch.setattr(archive_run, "decoded_events", decoded_events)
    report = _run(orders_app, view, tmp_path / "archive")
    assert (report.operations, report.removed) == (len(closed) - 1, len(closed) - 1)
    assert orders_app.recorder.select_events(unreadable) and view.get(unreadable) is not None
    assert set(archives_of(orders_app).archive_lookup(closed)) == set(closed[1:])
    [segment] = archives_of(orders_app).archive_segments()
    assert json.loads(segment.summary)["status"] == {"settled": len(closed) - 1}
    intended = [row for row in json.loads(segment.summary)["metrics"] if row[0] == "opledger_operations_intended"]
    assert sum(row[-1] for row in intended) == len(closed) - 1


def test_each_segment_is_selected_from_where_the_last_one_ended(
        orders_app: OrdersApp, clock: FakeClock, view: StatusView, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # From the oldest each time, a run would read again every row already taken or kept back
    # by a cutoff: a cost that grows with the store (docs/performance.md, "A big store").
    closed, _, _ = _store(orders_app, clock, view)
    archives = archives_of(orders_app)
    starts: list[object] = []
    original = type(archives).archive_candidates

    def candidates(self: object, before: datetime, after: object, limit: int) -> list:
        starts.append(after)
        return original(self, before, after, limit)  # type: ignore[arg-type]

    monkeypatch.setattr("adapters.archive_run.SEGMENT_OPERATIONS", 1)
    monkeypatch.setattr(type(archives), "archive_candidates", candidates)
    report = _run(orders_app, view, tmp_path / "archive")
    assert (report.operations, report.segments) == (len(closed), list(range(1, len(closed) + 1)))
    assert starts[0] is None and len(starts) == len(closed) + 1, "one selection per segment, and a last empty one"
    later = starts[1:]
    assert all(start is not None for start in later), "every later segment starts past the last one's key"
    assert later == sorted(later) and len(set(later)) == len(later), "each further on"  # type: ignore[type-var]
    assert {start[1] for start in later} == set(closed)  # type: ignore[index]
