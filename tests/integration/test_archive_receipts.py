"""Expired idempotency receipts leave the store by the archive run (issue 29 item 5), on both
backends: an expired receipt's records go into a segment with its final envelope and are
removed, a completed one stays, nothing is archived twice, the same key used again after removal
starts a new generation that is archived in its turn, and a receipt reopened between its segment
and its removal is kept whole."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from uuid import UUID

import pytest

from adapters.archive_run import ArchiveReport, run_archive
from adapters.demo.orders import OrdersApp
from adapters.doctor import run_doctor
from ledger.archive_check import verify_archive
from ledger.archives import read_statuses, segments
from ledger.clock import FakeClock
from ledger.config import Database, Settings
from ledger.receipts import Envelope
from migrations.drivers import archives_of
from projections.view import StatusView
from tests.archive_desk import APP_TOPIC, RECEIPT_BODY, archive_cli, closed_orders, expired_receipt

_receipt = expired_receipt


def _receipt_lines(out: Path) -> list[dict]:
    return [line for _, path in segments(out) for line in read_statuses(path) if line["kind"] == "receipt"]


def _versions(app: OrdersApp, receipt_id: UUID) -> list[int]:
    return [record.originator_version for record in app.recorder.select_events(receipt_id)]


def test_expired_receipts_are_archived_with_their_envelope_and_removed(
        orders_app: OrdersApp, clock: FakeClock, view: StatusView, migrated: Database, tmp_path: Path) -> None:
    closed, _, _ = closed_orders(orders_app, clock, view)
    expired, completed = _receipt(orders_app, clock, "k-1"), _receipt(orders_app, clock, "k-2", expire=False)
    out = tmp_path / "archive"
    assert archive_cli(migrated, out, "--dry-run")["receipts"] == 1

    done = archive_cli(migrated, out)
    assert (done["operations"], done["receipts"], done["receipts_removed"]) == (len(closed), 1, 1)
    assert _versions(orders_app, expired) == [] and _versions(orders_app, completed) == [1, 2]
    [line] = _receipt_lines(out)
    assert (line["id"], line["status"], line["scope"], line["key"]) == (str(expired), "expired", "place_order", "k-1")
    assert line["envelope"]["status"] == 201 and line["envelope"]["body"] == RECEIPT_BODY.decode()
    decoded = (segments(out)[-1][1] / "decoded.jsonl").read_text()
    assert "ReceiptCompleted" in decoded and '"request"' not in decoded, "the request stays in the raw records"
    recorded = {s.segment: s.digest for s in archives_of(orders_app).archive_segments()}
    assert verify_archive(out, recorded) == []
    assert archive_cli(migrated, out)["receipts"] == 0, "nothing archived twice"

    again = _receipt(orders_app, clock, "k-1")  # the same key after removal: a new generation
    assert again == expired and _versions(orders_app, again) == [1, 2, 3]
    third = archive_cli(migrated, out)
    assert (third["receipts"], third["receipts_removed"]) == (1, 1) and _versions(orders_app, again) == []
    assert [line["id"] for line in _receipt_lines(out)] == [str(expired), str(expired)]
    report = run_doctor(Settings(database_url=migrated.url(), app=APP_TOPIC))
    assert report.ok, [f for f in report.findings if f.status == "fail"]


class Killed(Exception):
    """Stands for a SIGKILL between recording a segment and removing what it holds."""


def test_a_receipt_reopened_before_its_removal_is_kept_whole(orders_app: OrdersApp, clock: FakeClock,
                                                             view: StatusView, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    expired = _receipt(orders_app, clock, "k-1")
    archives = archives_of(orders_app)

    def run() -> ArchiveReport:
        return run_archive(orders_app, view, archives, tmp_path / "archive", now=clock.now(),
                           limits={"payments.charge": clock.now() + timedelta(seconds=1)}, provenance={})

    with monkeypatch.context() as patch:  # the segment recorded, then killed before the removal
        patch.setattr(type(archives), "archive_receipts_remove", lambda *a, **k: (_ for _ in ()).throw(Killed()))
        with pytest.raises(Killed):
            run()
    receipt = orders_app.repository.get(expired)
    receipt.reopen(request={"body": {"n": 2}}, owner="serve-2", now=clock.now(), lease_seconds=30)
    orders_app.save(receipt)

    report = run()
    assert (report.receipts, report.receipts_removed) == (0, 1)
    assert _versions(orders_app, expired) == [1, 2, 3, 4], "kept whole, never cut"
    receipt = orders_app.repository.get(expired)
    receipt.complete(epoch=receipt.epoch, envelope=Envelope(status=201, headers=(), body=b"{}"), operation_ids=[],
                     now=clock.now())
    receipt.expire(now=clock.now())
    orders_app.save(receipt)
    later = run()
    assert (later.receipts, later.receipts_removed) == (0, 0), "never archived again"
    assert _versions(orders_app, expired) == [1, 2, 3, 4, 5, 6]


def test_a_receipt_segment_written_but_not_recorded_is_recorded_and_removed_by_the_next_run(
        orders_app: OrdersApp, clock: FakeClock, view: StatusView, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    expired = _receipt(orders_app, clock, "k-1")
    archives = archives_of(orders_app)
    out = tmp_path / "archive"

    def run() -> ArchiveReport:
        return run_archive(orders_app, view, archives, out, now=clock.now(),
                           limits={"payments.charge": clock.now() + timedelta(seconds=1)}, provenance={})

    with monkeypatch.context() as patch:  # written and verified, then killed before it was recorded
        patch.setattr(type(archives), "archive_record", lambda *a, **k: (_ for _ in ()).throw(Killed()))
        with pytest.raises(Killed):
            run()
    assert len(segments(out)) == 1 and archives.archive_segments() == [] and _versions(orders_app, expired)

    report = run()
    assert (report.segments, report.receipts, report.receipts_removed) == ([1], 0, 1)
    assert _versions(orders_app, expired) == [] and archives.archive_receipts_held([expired]) == set()
    assert [line["id"] for line in _receipt_lines(out)] == [str(expired)]
