"""``opledger doctor``'s retention check (issue 29 item 1), on both backends: closed operations
older than 90 days that no retention policy covers are warned about (their count per
integration, and how to set a policy), and not when a policy covers them or they are younger."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.demo.orders import OrdersApp
from adapters.doctor import run_doctor
from ledger.clock import FakeClock
from ledger.config import Database, Settings
from projections.view import StatusView
from tests.archive_desk import APP_TOPIC as APP
from tests.archive_desk import closed_orders


def _retention(db: Database, clock: FakeClock, *, days: int, retention: str | None) -> tuple[str, str]:
    report = run_doctor(Settings(database_url=db.url(), app=APP, retention=retention),
                        now=clock.now() + timedelta(days=days))
    assert report.ok, [f for f in report.findings if f.status == "fail"]
    [finding] = [f for f in report.findings if f.name == "retention"]
    return finding.status, finding.detail


def test_old_closed_operations_without_a_policy_are_warned_about(orders_app: OrdersApp, clock: FakeClock,
                                                                view: StatusView, migrated: Database) -> None:
    closed, _, _ = closed_orders(orders_app, clock, view)
    status, detail = _retention(migrated, clock, days=91, retention=None)
    assert status == "warn"
    assert detail.startswith(f"{len(closed)} closed operation(s) older than 90 days and no retention policy"), detail
    assert "notifications.send: 1" in detail and "payments.charge: 1" in detail
    assert "OPLEDGER_RETENTION" in detail and "retention_seconds" in detail and "opledger archive" in detail


@pytest.mark.parametrize(("days", "retention"), [(91, "180d"), (89, None)], ids=["a policy", "younger"])
def test_no_warning_when_a_policy_covers_them_or_they_are_younger(days: int, retention: str | None,
                                                                  orders_app: OrdersApp, clock: FakeClock,
                                                                  view: StatusView, migrated: Database) -> None:
    closed_orders(orders_app, clock, view)
    status, detail = _retention(migrated, clock, days=days, retention=retention)
    assert (status, detail) == ("ok", "no closed operation older than 90 days lacks a retention policy")


def test_a_server_without_autovacuum_is_warned_about(migrated: Database) -> None:
    # The server's own setting, read apart, decides what doctor must say; SQLite has none.
    report = run_doctor(Settings(database_url=migrated.url(), app=APP))
    found = [f for f in report.findings if f.name == "autovacuum"]
    if migrated.backend == "sqlite":
        assert found == []
        return
    import psycopg

    with psycopg.connect(migrated.conninfo()) as conn:
        setting = conn.execute("SHOW autovacuum").fetchone()[0]
    [finding] = found
    if setting == "on":
        assert finding.status == "ok" and "autovacuum on" in finding.detail
    else:
        assert finding.status == "warn" and finding.detail.startswith("the server runs with autovacuum off")
        assert "VACUUM (ANALYZE)" in finding.detail and "Retention and archives" in finding.detail


@pytest.mark.parametrize(("running", "says"), [(True, "ok"), (False, "warn"), (None, None)])
def test_the_autovacuum_finding_follows_the_driver(running: bool | None, says: str | None) -> None:
    from adapters.doctor import DoctorReport, _check_autovacuum

    class Driver:
        def autovacuum(self) -> bool | None:
            return running

    report = DoctorReport(store="test")
    _check_autovacuum(report, Driver())  # type: ignore[arg-type]
    assert [f.status for f in report.findings] == ([says] if says else [])
