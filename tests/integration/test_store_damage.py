"""Issue 16 item 4: a damaged SQLite store is refused with one clear error; ``opledger doctor``.

Damage is made for real: a flipped page-type byte, a truncated file, a WAL deleted after a
SIGKILLed owner, a status row edited behind the projection's back.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adapters.demo.orders import OrdersApp
from adapters.runtime import open_store
from ledger.config import Database, Settings
from ledger.errors import StoreDamagedError
from migrations import migrate
from projections.status import StatusProjection

APP = "adapters.demo.orders:OrdersApp"
REPO = Path(__file__).resolve().parents[2]


def _store(tmp_path: Path, *, project: bool = True, orders: int = 3) -> Database:
    database = Database.parse(f"sqlite:///{tmp_path / 'store' / 'opledger.db'}")
    migrate(database, OrdersApp)
    with open_store(Settings(database_url=database.url(), app=APP), write=True) as store:
        for _ in range(orders):
            store.app.place_order(customer_email="a@example.test", amount_cents=5, payments_url="http://p/1",
                                  notify_url="http://p/2")
        if project:
            StatusProjection(app=store.app, view=store.view).catch_up()
    return database


def _flip_page_type(path: Path, table: str) -> None:
    """Overwrite the b-tree page-type byte of ``table``'s root page: any read of it is corrupt."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the page must be in the file, not the WAL
        root, = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        page_size, = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\x7f")


def _edited_store(tmp_path: Path, sql: str) -> tuple[Database, int, dict]:
    """A fresh store (``_store``) with ``sql`` run on it behind the ledger's back, and what
    ``opledger doctor`` then says of it: ``(database, exit code, report)``."""
    database = _store(tmp_path)
    assert database.path is not None
    conn = sqlite3.connect(database.path)
    with conn:
        conn.execute(sql)
    conn.close()
    code, report = _doctor(database)
    return database, code, report


def cli(database: Database, *args: str, timeout: float = 60,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPLEDGER_DATABASE_URL": database.url(), "OPLEDGER_APP": APP,
           "PYTHONPATH": str(REPO), "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _doctor(database: Database, *args: str) -> tuple[int, dict]:
    done = cli(database, "doctor", "--json", *args)
    return done.returncode, json.loads(done.stdout)


def _failed(report: dict) -> dict[str, str]:
    return {c["name"]: c["detail"] for c in report["checks"] if c["status"] == "fail"}


def test_doctor_on_a_healthy_store_exits_0_and_reports_each_check(tmp_path: Path) -> None:
    database = _store(tmp_path)
    code, report = _doctor(database)
    assert code == 0 and report["ok"], report
    names = [c["name"] for c in report["checks"]]
    for name in ("directory", "store file", "owner", "wal", "header", "journal_mode", "integrity_check",
                 "identity", "records", "log", "tracking", "drift", "retention"):
        assert name in names
    assert "quick_check" in [c["name"] for c in _doctor(database, "--quick")[1]["checks"]]
    readable = cli(database, "doctor")
    assert readable.returncode == 0 and "healthy" in readable.stdout


def test_a_flipped_byte_is_refused_everywhere_with_one_line(tmp_path: Path) -> None:
    database = _store(tmp_path)
    assert database.path is not None
    _flip_page_type(database.path, "opledger_operation_status")
    code, report = _doctor(database)
    assert code == 1 and "integrity_check" in _failed(report)
    for args in (["ops", "list"], ["attention"], ["projections", "rebuild"], ["migrate"]):
        done = cli(database, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, (args, done.stderr)
        assert f"the store {database.path} is damaged" in done.stderr and "opledger doctor" in done.stderr
    # Without quick_check at open, the read that meets the damaged page gives the same one line.
    done = cli(database, "ops", "list", env={"OPLEDGER_OPEN_CHECK": "header"})
    assert done.returncode == 2 and "is damaged" in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_a_read_that_meets_damage_raises_the_store_error(tmp_path: Path) -> None:
    database = _store(tmp_path)
    assert database.path is not None
    with pytest.raises(StoreDamagedError, match="is damaged: .*malformed") as caught:
        with open_store(Settings(database_url=database.url(), app=APP), write=False) as store:
            _flip_page_type(database.path, "stored_events")  # damage while the store is open
            store.app.recorder.select_notifications(start=1, limit=10)
    assert "\n" not in str(caught.value)


def test_a_worker_on_a_damaged_store_exits_with_one_error_instead_of_looping(tmp_path: Path) -> None:
    database = _store(tmp_path)
    assert database.path is not None
    _flip_page_type(database.path, "stored_events")
    started = time.monotonic()
    done = cli(database, "worker", timeout=30)
    assert done.returncode == 2 and time.monotonic() - started < 30
    assert "Traceback" not in done.stderr and "is damaged" in done.stderr


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    database = _store(tmp_path)
    assert database.path is not None
    size = database.path.stat().st_size
    with open(database.path, "r+b") as f:
        f.truncate(size - 1000)
    code, report = _doctor(database)
    assert code == 1 and "truncated" in _failed(report)["header"]
    done = cli(database, "ops", "list")
    assert done.returncode == 2 and "truncated" in done.stderr and "Traceback" not in done.stderr


def _killed_owner_leaving_a_wal(database: Database) -> None:
    script = ("import os, signal; from adapters.demo.orders import OrdersApp; app = OrdersApp(); "
              "app.place_order(customer_email='b@example.test', amount_cents=7, payments_url='http://p/1', "
              "notify_url='http://p/2'); os.kill(os.getpid(), signal.SIGKILL)")
    env = {**os.environ, "OPLEDGER_DATABASE_URL": database.url(), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr


def test_a_stale_wal_after_a_crash_is_replayed(tmp_path: Path) -> None:
    database = _store(tmp_path)
    assert database.path is not None
    _killed_owner_leaving_a_wal(database)
    assert Path(f"{database.path}-wal").stat().st_size > 0
    code, report = _doctor(database)
    assert code == 0, report
    with open_store(Settings(database_url=database.url(), app=APP), write=True) as store:
        StatusProjection(app=store.app, view=store.view).catch_up()
        assert sum(store.view.counts().values()) == 8, "the killed owner's commit survived in the WAL"


def test_a_missing_wal_is_named_and_refused(tmp_path: Path) -> None:
    database = _store(tmp_path)
    assert database.path is not None
    _killed_owner_leaving_a_wal(database)
    Path(f"{database.path}-wal").unlink()
    code, report = _doctor(database)
    assert code == 1 and "WAL file" in _failed(report)["wal"] and "missing" in _failed(report)["wal"]
    with pytest.raises(StoreDamagedError, match="WAL file .* is missing"):
        with open_store(Settings(database_url=database.url(), app=APP), write=True):
            pass
    done = cli(database, "ops", "list")
    assert done.returncode == 2 and "is missing" in done.stderr


def test_a_drifted_view_is_reported(tmp_path: Path) -> None:
    database, code, report = _edited_store(tmp_path, "UPDATE opledger_operation_status SET attempts = 1 WHERE rowid = "
                                                     "(SELECT min(rowid) FROM opledger_operation_status)")
    assert code == 1 and "attempts" in _failed(report)["drift"]
    assert cli(database, "projections", "rebuild").returncode == 0
    assert _doctor(database)[0] == 0


def test_a_status_row_the_log_cannot_explain_is_reported(tmp_path: Path) -> None:
    _, code, report = _edited_store(tmp_path, "UPDATE opledger_operation_status SET version = 99 WHERE rowid = "
                                              "(SELECT min(rowid) FROM opledger_operation_status)")
    assert code == 1 and "version the log does not hold" in _failed(report)["tracking"]


def test_a_deleted_record_is_a_gap_in_the_log(tmp_path: Path) -> None:
    _, code, report = _edited_store(tmp_path, "DELETE FROM stored_events WHERE rowid = 2")
    assert code == 1 and "missing from the log" in _failed(report)["log"]


def test_a_record_that_does_not_decode_is_reported(tmp_path: Path) -> None:
    _, code, report = _edited_store(tmp_path, "UPDATE stored_events SET state = X'7b7d' WHERE rowid = "
                                              "(SELECT max(rowid) FROM stored_events WHERE topic GLOB 'ledger.*')")
    assert code == 1 and "do not decode" in _failed(report)["records"]


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_doctor_on_postgres_checks_identity_log_and_view(migrated: Database) -> None:
    with open_store(Settings(database_url=migrated.url(), app=APP), write=True) as store:
        store.app.place_order(customer_email="a@example.test", amount_cents=5, payments_url="http://p/1",
                              notify_url="http://p/2")
        StatusProjection(app=store.app, view=store.view).catch_up()
    code, report = _doctor(migrated)
    assert code == 0, report
    assert {c["name"] for c in report["checks"]} == {
        "identity", "autovacuum", "records", "log", "tracking", "drift", "retention"}


def test_damage_met_while_running_stops_the_worker_with_the_one_error(tmp_path: Path, monkeypatch) -> None:
    import threading

    from adapters.runtime import run_worker
    from tests.conftest import SECRET

    database = _store(tmp_path)

    def damaged_page(self: StatusProjection) -> int:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(StatusProjection, "run_once", damaged_page)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            run_worker(Settings(database_url=database.url(), app=APP, webhook_secret=SECRET),
                       stop=threading.Event())
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the worker kept running on a damaged store"
    assert len(raised) == 1 and isinstance(raised[0], StoreDamagedError), raised
    assert "malformed" in str(raised[0])


def test_backup_then_restore_as_the_runbook_says(tmp_path: Path) -> None:
    import shutil

    database = _store(tmp_path)
    assert database.path is not None
    dest = tmp_path / "backups" / "opledger-1.db"
    dest.parent.mkdir(mode=0o700)
    done = cli(database, "backup", str(dest))
    assert done.returncode == 0 and "checked" in done.stdout, done.stderr
    assert sorted(p.name for p in dest.parent.iterdir()) == ["opledger-1.db"]
    assert (dest.stat().st_mode & 0o777) == 0o600
    again = cli(database, "backup", str(dest))
    assert again.returncode == 2 and "exists" in again.stderr
    _flip_page_type(database.path, "stored_events")
    assert _doctor(database)[0] == 1
    damaged_dir = tmp_path / "damaged"
    damaged_dir.mkdir(mode=0o700)
    for suffix in ("", "-wal", "-shm"):  # the runbook's restore: move the damaged store aside, WAL and index too
        part = Path(f"{database.path}{suffix}")
        if part.exists():
            part.rename(damaged_dir / part.name)
    shutil.copyfile(dest, database.path)
    database.path.chmod(0o600)
    code, report = _doctor(database)
    assert code == 0, report
    listed = cli(database, "ops", "list", "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 6
