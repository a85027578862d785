"""Crash consistency of ``opledger archive`` (issue 29 item 2; docs/adr/0010-archives.md §3).

A real ``opledger archive`` process (``tests.process.archive_runner``: segments of 3 operations,
removal transactions of 2, so eight closed operations make three segments and five removal
batches, and two expired receipts a fourth segment) SIGKILLs itself at one of its commit
boundaries (``ledger.failpoints``). Then:

- nothing was lost: each closed operation's history is whole in the store, or the operation is
  in the archive index and in a complete segment that verifies and holds its records; each
  expired receipt is whole in the store or in such a segment;
- a rerun exits 0 and finishes the work: every closed operation is in the index and in exactly
  one segment, each receipt in exactly one segment, none is left in the store, the open ones
  are untouched, the archive verifies against the digests the store recorded (the hash chain
  and its head), and ``doctor`` passes.

Each boundary runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from pathlib import Path
from uuid import UUID

import pytest

from adapters.demo.orders import OrdersApp
from adapters.doctor import run_doctor
from ledger.archive_check import verify_archive, verify_segment
from ledger.archives import read_records, read_statuses, segments
from ledger.clock import FakeClock
from ledger.config import Database, Settings
from migrations.drivers import archives_of
from projections import open_view
from tests.archive_desk import APP_TOPIC as APP
from tests.archive_desk import closed_orders, expired_receipt
from tests.process.conftest import read_only_env, run_cli

pytestmark = pytest.mark.process

KILLED = -signal.SIGKILL
CLOSED_ORDERS = 4
"""Each order has two operations (payment and notification): eight closed operations."""
BOUNDARIES = [
    "archive_segment:before",  # the first segment's files written, still .partial
    "archive_segment:after@2",  # the second segment in place (chained to the first), not recorded
    "archive_record:after",  # the first segment recorded, nothing removed
    "archive_remove:after",  # between the first segment's two removal batches
    "archive_remove:after@3",  # the first segment gone, between the second's batches
    "archive_segment:after@4",  # the receipts' segment in place, not recorded
    "archive_record:after@4",  # the receipts' segment recorded, their records not removed
]
RECEIPTS = 2


def _store(db: Database) -> tuple[list[UUID], list[UUID], list[UUID]]:
    """``CLOSED_ORDERS`` closed orders and one open (``tests.archive_desk.closed_orders``) and
    ``RECEIPTS`` expired receipts, every handle closed again (one process owns an SQLite store).
    Returns (closed ids, open ids, receipt ids)."""
    clock = FakeClock()
    app = OrdersApp(env=db.library_env(create_table=False), clock=clock)
    view = open_view(db)
    try:
        closed, still_open, _ = closed_orders(app, clock, view, orders=CLOSED_ORDERS)
        return closed, still_open, [expired_receipt(app, clock, f"key-{n}") for n in range(RECEIPTS)]
    finally:
        view.close()
        app.close()


def _archive(database_url: str, out: Path, failpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(database_url, APP, "archive", "--out", str(out), "--before", "1s", "--json",
                   failpoint=failpoint, module="tests.process.archive_runner")


def _in_segments(out: Path) -> tuple[Counter[UUID], dict[UUID, set[int]]]:
    """Each archived id's count across the complete segments that verify (operations and
    receipts alike), and the record versions those segments hold of it."""
    held: Counter[UUID] = Counter()
    versions: dict[UUID, set[int]] = {}
    for _, path in segments(out):
        assert verify_segment(path) == [], f"{path.name} is in place but does not verify"
        held.update(UUID(s["id"]) for s in read_statuses(path))
        for record in read_records(path):
            versions.setdefault(record.originator_id, set()).add(record.originator_version)
    return held, versions


def _nothing_lost(db: Database, out: Path, closed: list[UUID], still_open: list[UUID], receipts: list[UUID]) -> None:
    app = OrdersApp(env=read_only_env(db))
    try:
        index = archives_of(app).archive_lookup([*closed, *still_open])
        _, archived_versions = _in_segments(out)
        for op_id in closed:
            stored = [r.originator_version for r in app.recorder.select_events(op_id)]
            if stored and stored == list(range(1, len(stored) + 1)):
                continue  # whole in the hot store
            assert op_id in index, f"{op_id}: records removed ({stored}) but not in the archive index"
            kept = archived_versions.get(op_id, set())
            assert kept and kept == set(range(1, max(kept) + 1)), f"{op_id}: no segment holds its history"
            assert all(version > max(kept) for version in stored), f"{op_id}: part of it removed, part kept"
        for op_id in index:
            assert op_id in archived_versions, f"{op_id}: indexed, in no complete segment that verifies"
        for op_id in still_open:
            assert op_id not in index and app.recorder.select_events(op_id)
        for receipt_id in receipts:
            stored = [r.originator_version for r in app.recorder.select_events(receipt_id)]
            assert stored == [1, 2, 3] or (not stored and archived_versions.get(receipt_id) == {1, 2, 3}), \
                f"receipt {receipt_id}: {stored} in the store, none in a segment"
    finally:
        app.close()


def _finished(db: Database, out: Path, closed: list[UUID], still_open: list[UUID], receipts: list[UUID]) -> None:
    app = OrdersApp(env=read_only_env(db))
    try:
        archives = archives_of(app)
        recorded = {s.segment: s.digest for s in archives.archive_segments()}
        index = archives.archive_lookup([*closed, *still_open])
        assert set(index) == set(closed), "every closed operation archived, no open one"
        assert not any(app.recorder.select_events(op_id) for op_id in closed), "none left in the hot store"
        assert all(app.recorder.select_events(op_id) for op_id in still_open)
        assert not any(app.recorder.select_events(receipt_id) for receipt_id in receipts)
    finally:
        app.close()
    held, versions = _in_segments(out)
    assert held == Counter([*closed, *receipts]), "each closed operation and receipt in exactly one segment"
    assert all(versions[op_id] for op_id in [*closed, *receipts])
    assert sorted(recorded) == [n for n, _ in segments(out)] == [1, 2, 3, 4]
    assert {segment for segment, _ in index.values()} == {1, 2, 3}, "the operations in the first three"
    assert verify_archive(out, recorded) == [], "the chain and its recorded head verify"


@pytest.mark.parametrize("failpoint", BOUNDARIES)
def test_a_kill_at_an_archive_commit_boundary_loses_nothing_and_a_rerun_finishes(
        failpoint: str, migrated: Database, database_url: str, tmp_path: Path) -> None:
    closed, still_open, receipts = _store(migrated)
    out = tmp_path / "archive"

    killed = _archive(database_url, out, failpoint)
    assert killed.returncode == KILLED, killed.stderr[-2000:]
    _nothing_lost(migrated, out, closed, still_open, receipts)

    rerun = _archive(database_url, out)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    report = json.loads(rerun.stdout)
    assert report["removed"] + report["receipts_removed"] >= 1 and report["dry_run"] is False
    _finished(migrated, out, closed, still_open, receipts)
    doctor = run_doctor(Settings(database_url=database_url, app=APP))
    assert doctor.ok, [f for f in doctor.findings if f.status == "fail"]

    again = _archive(database_url, out)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (json.loads(again.stdout)["operations"], json.loads(again.stdout)["receipts"]) == (0, 0)
    _finished(migrated, out, closed, still_open, receipts)
