"""``opledger archive restore`` (issue 29 item 3), on both backends: a segment's records go back
into another store byte for byte, its timeline replays the same, a rerun writes nothing, and a
tampered segment or a store holding another history is refused with nothing written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from typer.testing import CliRunner

from adapters.cli.app import app as cli
from adapters.demo.orders import OrdersApp
from adapters.operator import timeline_entries
from ledger.archive_restore import RestoreConflictError, restore_segment
from ledger.archives import ArchiveError, StoredRecord, write_segment
from ledger.clock import FakeClock
from ledger.config import Database
from migrations import migrate
from tests.conftest import drop_schema, new_postgres_url, require_postgres


@pytest.fixture
def other(database_url: str, tmp_path: Path) -> Iterator[Database]:
    """A second fresh store on the same backend as ``database``, migrated for ``OrdersApp``."""
    if database_url.startswith("sqlite"):
        database = Database.parse(f"sqlite:///{tmp_path / 'audit' / 'opledger.db'}")
        migrate(database, OrdersApp)
        yield database
        return
    require_postgres()
    url, schema = new_postgres_url()
    try:
        database = Database.parse(url)
        migrate(database, OrdersApp)
        yield database
    finally:
        drop_schema(schema)


def _settled_operations(app: OrdersApp, clock: FakeClock) -> list[UUID]:
    _, op_ids = app.place_order(customer_email="c@example.test", amount_cents=100,
                                payments_url="http://p/pay", notify_url="http://p/n")
    for op_id in op_ids:
        op = app.get_operation(op_id)
        epoch = op.claim(now=clock.now(), worker_id="w", lease_seconds=30)
        op.start_attempt(epoch=epoch, now=clock.now(), attempt_id=uuid4(), request_fingerprint="f")
        op.succeed(epoch=epoch, now=clock.now(), attempt_id=op.last_attempt_id)
        app.save(op)
    return list(op_ids)


def _segment(app: OrdersApp, op_ids: list[UUID], archive: Path, clock: FakeClock) -> Path:
    stored = [s for op_id in op_ids for s in app.recorder.select_events(op_id)]
    records = [StoredRecord(s.originator_id, s.originator_version, s.topic, bytes(s.state)) for s in stored]
    decoded = [{"id": str(r.originator_id), "version": r.originator_version} for r in records]
    statuses = [{"id": str(op_id), "kind": "operation", "status": "succeeded"} for op_id in op_ids]
    return write_segment(archive, records=records, decoded=decoded, statuses=statuses, written_at=clock.now(),
                         provenance={"identity": "test", "schema": 1, "codec": 1, "version": "0", "commit": ""}).path


@pytest.fixture
def segment(orders_app: OrdersApp, clock: FakeClock, tmp_path: Path) -> tuple[Path, list[UUID]]:
    op_ids = _settled_operations(orders_app, clock)
    return _segment(orders_app, op_ids, tmp_path / "archive", clock), op_ids


def _timelines(app: OrdersApp, op_ids: list[UUID]) -> list[list[dict[str, Any]]]:
    return [timeline_entries(app, op_id) for op_id in op_ids]


def test_a_restored_segment_replays_the_same_timeline_and_a_rerun_writes_nothing(
        segment: tuple[Path, list[UUID]], orders_app: OrdersApp, other: Database, clock: FakeClock) -> None:
    path, op_ids = segment
    audit = OrdersApp(env=other.library_env(create_table=False), clock=clock)
    try:
        restored = restore_segment(path, audit.recorder)
        records = sum(len(orders_app.recorder.select_events(op_id)) for op_id in op_ids)
        assert (restored.aggregates, restored.written, restored.present) == (len(op_ids), records, 0)
        for op_id in op_ids:
            original = [(s.originator_version, s.topic, bytes(s.state)) for s in orders_app.recorder.select_events(op_id)]
            back = [(s.originator_version, s.topic, bytes(s.state)) for s in audit.recorder.select_events(op_id)]
            assert back == original  # byte for byte
        assert _timelines(audit, op_ids) == _timelines(orders_app, op_ids)
        assert audit.get_operation(op_ids[0]).status.value == "succeeded"

        again = restore_segment(path, audit.recorder)
        assert (again.written, again.present) == (0, records)
    finally:
        audit.close()


def test_a_tampered_segment_is_refused_and_nothing_is_written(
        segment: tuple[Path, list[UUID]], other: Database, clock: FakeClock) -> None:
    path, op_ids = segment
    records = path / "records.jsonl"
    records.write_bytes(records.read_bytes().replace(b'"version":1', b'"version":9', 1))
    audit = OrdersApp(env=other.library_env(create_table=False), clock=clock)
    try:
        with pytest.raises(ArchiveError, match="records.jsonl was changed"):
            restore_segment(path, audit.recorder)
        assert all(not audit.recorder.select_events(op_id) for op_id in op_ids)
    finally:
        audit.close()


def test_a_store_holding_another_history_is_never_overwritten(
        segment: tuple[Path, list[UUID]], orders_app: OrdersApp, clock: FakeClock, tmp_path: Path) -> None:
    path, op_ids = segment
    # The same ids, another history: the segment of a store that went on differently.
    (tmp_path / "archive").rename(tmp_path / "kept")
    with pytest.raises(RestoreConflictError, match="a restore never overwrites"):
        restore_segment(_rewritten(tmp_path / "kept" / path.name, tmp_path / "changed", clock), orders_app.recorder)


def _rewritten(segment: Path, archive: Path, clock: FakeClock) -> Path:
    """``segment``'s records with the last record's bytes changed, written as a new segment."""
    from ledger.archives import read_records, read_statuses

    records = read_records(segment)
    last = records[-1]
    records[-1] = StoredRecord(last.originator_id, last.originator_version, last.topic, last.state + b" ")
    decoded = [{"id": str(r.originator_id), "version": r.originator_version} for r in records]
    return write_segment(archive, records=records, decoded=decoded, statuses=read_statuses(segment),
                         written_at=clock.now(),
                         provenance={"identity": "test", "schema": 1, "codec": 1, "version": "0", "commit": ""}).path


def test_the_cli_restores_into_another_store(segment: tuple[Path, list[UUID]], other: Database,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path, op_ids = segment
    monkeypatch.setenv("OPLEDGER_APP", "adapters.demo.orders:OrdersApp")
    url = ["--database-url", other.url()]
    result = CliRunner().invoke(cli, ["archive", "restore", str(path), "--json", *url])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["aggregates"] == len(op_ids) and answer["written"] > 0 and answer["present"] == 0
    shown = CliRunner().invoke(cli, ["ops", "show", str(op_ids[0]), "--json", *url])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["status"] == "succeeded"
    tampered = path / "status.jsonl"
    tampered.write_text(tampered.read_text() + "\n")
    refused = CliRunner().invoke(cli, ["archive", "restore", str(path), *url])
    assert refused.exit_code == 2
    assert "does not verify, nothing restored" in refused.output and "Traceback" not in refused.output
