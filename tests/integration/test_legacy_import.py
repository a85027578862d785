"""Issue 16 item 5: ``opledger import-json``: validation first, a durable backup, an atomic switch,
once per file; and SIGKILL at each of its five points leaves the old store or the complete new one."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.demo.legacy import JobsApp
from adapters.doctor import run_doctor
from adapters.runtime import open_store
from ledger.clock import FakeClock
from ledger.config import Database, Settings
from migrations import migrate
from migrations.legacy_format import LegacyImportError, job_digest
from migrations.legacy_import import import_json

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "docs" / "examples" / "legacy-jobs.json"
APP = "adapters.demo.legacy:JobsApp"
KILLED = -signal.SIGKILL


def _settings(database: Database) -> Settings:
    return Settings(database_url=database.url(), app=APP)


def _cli(database: Database, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "OPLEDGER_DATABASE_URL": database.url(), "OPLEDGER_APP": APP, "PYTHONPATH": str(REPO),
            "COLUMNS": "200", **env}
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], env=full, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def jobs_db(database: Database) -> Database:
    migrate(database, JobsApp)
    return database


def test_the_sample_imports_once_with_a_durable_backup(jobs_db: Database) -> None:
    report = import_json(jobs_db, JobsApp, SAMPLE, now=FakeClock().now())
    assert (report.imported, report.skipped, report.already) == (5, 0, False)
    with open_store(_settings(jobs_db), write=True) as store:
        from projections.status import StatusProjection

        StatusProjection(app=store.app, view=store.view).catch_up()
        statuses = sorted(row.status for row in store.view.list(limit=100))
        attention = [row.ambiguity_reason for row in store.view.attention()]
    assert statuses == ["ambiguous", "cancelled", "pending", "settled", "settled"]
    assert attention == ["legacy_in_flight"]
    assert import_json(jobs_db, JobsApp, SAMPLE, now=FakeClock().now()).already, "twice is a no-op"
    assert run_doctor(_settings(jobs_db)).ok
    if jobs_db.backend == "sqlite":
        assert report.backup is not None and report.backup.exists()
        assert stat.S_IMODE(report.backup.stat().st_mode) == 0o600
        kept = jobs_db.path.with_name(f"{jobs_db.path.name}.import-{report.file_sha256[:12]}.json")
        assert kept.read_bytes() == SAMPLE.read_bytes()
        before = Database.parse(f"sqlite:///{report.backup}")
        with open_store(Settings(database_url=before.url(), app=APP), write=False) as old:
            assert old.app.recorder.max_notification_id() in (None, 0), "the backup is the store before the import"
        leftovers = [p.name for p in jobs_db.path.parent.iterdir() if ".tmp" in p.name]
        assert leftovers == []


def _files(database: Database) -> list[str]:
    """The store directory's files, less the WAL and index a read-only check leaves."""
    if database.backend != "sqlite":
        return []
    return sorted(p.name for p in database.path.parent.iterdir() if not p.name.endswith(("-wal", "-shm")))


DEEP = "nested 5,000 levels deep"


def _broken_copy(tmp_path: Path, change) -> Path:
    data = json.loads(SAMPLE.read_text())
    change(data)
    path = tmp_path / "broken.json"
    # DEEP stands for a value nested too deep for any JSON codec: written as text.
    path.write_text(json.dumps(data).replace(json.dumps(DEEP), "[" * 5_000 + "]" * 5_000))
    return path


def _redigest(job: dict) -> None:
    job["digest"] = job_digest(job)


@pytest.mark.parametrize("change, problem", [
    (lambda d: d.update(count=6), "count says 6 jobs, the file lists 5"),
    (lambda d: d["jobs"][0]["payload"].update(customer="c-99"), "job job-0001: digest"),
    (lambda d: (d["jobs"][1].update(id="job-0001"), _redigest(d["jobs"][1])), "duplicate id"),
    (lambda d: (d["jobs"][2].update(queue="nope.queue"), _redigest(d["jobs"][2])), "job job-0003: .*nope.queue"),
    (lambda d: (d["jobs"][2]["payload"].update(secret="x"), _redigest(d["jobs"][2])), "job job-0003: payload"),
    (lambda d: d.update(format="other/2"), "format is 'other/2'"),
    (lambda d: d["jobs"][2]["payload"].update(deep=DEEP), "is not JSON"),
])
def test_a_bad_export_is_refused_before_anything_is_written(jobs_db: Database, tmp_path: Path, change,
                                                           problem: str) -> None:
    path = _broken_copy(tmp_path, change)
    before = _files(jobs_db)
    with pytest.raises(LegacyImportError, match=problem):
        import_json(jobs_db, JobsApp, path, now=FakeClock().now())
    if jobs_db.backend == "sqlite":
        assert _files(jobs_db) == before, "no backup, copy or scratch file was written"
    done = _cli(jobs_db, "import-json", str(path))
    assert done.returncode == 2 and "nothing was written" in done.stderr and "Traceback" not in done.stderr


def test_the_cli_imports_reports_and_is_a_no_op_the_second_time(jobs_db: Database) -> None:
    first = _cli(jobs_db, "import-json", str(SAMPLE), "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["imported"] == 5
    second = _cli(jobs_db, "import-json", str(SAMPLE))
    assert second.returncode == 0 and "was imported before: nothing to do" in second.stdout


@pytest.mark.process
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("point", [1, 2, 3, 4, 5])
def test_a_kill_mid_import_leaves_the_old_store_or_the_complete_new_one(point: int, jobs_db: Database) -> None:
    killed = _cli(jobs_db, "import-json", str(SAMPLE), OPLEDGER_FAILPOINT=f"import@{point}")
    assert killed.returncode == KILLED, killed.stderr
    report = run_doctor(_settings(jobs_db))
    assert report.ok, [f for f in report.findings if f.status == "fail"]
    with open_store(_settings(jobs_db), write=False) as store:
        events = store.app.recorder.max_notification_id() or 0
    assert events in (0, 25), "either the old store (empty) or the complete new one (5 jobs, 25 events)"
    assert (events == 25) == (point == 5), "only the rename switches"
    again = _cli(jobs_db, "import-json", str(SAMPLE), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["already_imported"] == (point == 5)
    with open_store(_settings(jobs_db), write=False) as store:
        assert store.app.recorder.max_notification_id() == 25
        assert sum(store.view.counts().values()) == 5
    assert run_doctor(_settings(jobs_db)).ok
