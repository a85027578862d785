"""Issue 16 items 1–3: ownership before any read, identity pinning, path and permission hardening."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.demo.orders import OrdersApp
from adapters.runtime import open_store
from ledger.config import Database, Settings
from ledger.errors import StoreIdentityError, StoreLockedError, StorePathError
from ledger.persistence import StoreLock
from ledger.store_files import path_findings
from ledger.store_identity import STORE_TABLE, check_store_identity
from migrations import migrate

APP = "adapters.demo.orders:OrdersApp"


def _settings(database: Database, **extra: object) -> Settings:
    return Settings(database_url=database.url(), app=APP, **extra)


def _sqlite(tmp_path: Path) -> Database:
    database = Database.parse(f"sqlite:///{tmp_path / 'store' / 'opledger.db'}")
    migrate(database, OrdersApp)
    return database


def _record_order(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record, in order, each lock taken and each SQLite connection opened by this process."""
    events: list[str] = []
    real_connect, real_lock = sqlite3.connect, StoreLock._lock_file

    def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        events.append(f"read {args[0] if args else kwargs.get('database')}")
        return real_connect(*args, **kwargs)  # type: ignore[arg-type]

    def lock_file(self: StoreLock) -> int:
        events.append("lock")
        return real_lock(self)

    monkeypatch.setattr(sqlite3, "connect", connect)
    monkeypatch.setattr(StoreLock, "_lock_file", lock_file)
    return events


def test_an_owner_takes_the_lock_before_anything_reads_the_store(tmp_path: Path, monkeypatch) -> None:
    database = _sqlite(tmp_path)
    events = _record_order(monkeypatch)
    with open_store(_settings(database), write=True):
        pass
    assert events[0] == "lock" and len(events) > 1, events


def test_an_application_built_from_settings_takes_the_lock_first(tmp_path: Path, monkeypatch) -> None:
    database = _sqlite(tmp_path)
    monkeypatch.setenv("OPLEDGER_DATABASE_URL", database.url())
    events = _record_order(monkeypatch)
    OrdersApp().close()
    assert events[0] == "lock" and len(events) > 1, events


def test_migrate_takes_the_lock_before_anything_reads_the_store(tmp_path: Path, monkeypatch) -> None:
    database = _sqlite(tmp_path)
    events = _record_order(monkeypatch)
    migrate(database, OrdersApp)
    assert events[0] == "lock" and len(events) > 1, events


def test_a_store_another_process_owns_is_refused_before_any_read(tmp_path: Path, monkeypatch) -> None:
    database = _sqlite(tmp_path)
    owner = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from ledger.persistence import StoreLock; "
         "from pathlib import Path; StoreLock(Path(sys.argv[1])).acquire(); print('ready', flush=True); "
         "time.sleep(60)", str(database.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
        events = _record_order(monkeypatch)
        with pytest.raises(StoreLockedError):
            with open_store(_settings(database), write=True):
                pass
        with pytest.raises(StoreLockedError):
            migrate(database, OrdersApp)
        assert events == ["lock", "lock"], "nothing read the store before the lock was refused"
        with open_store(_settings(database), write=False) as reader:  # readers take no lock
            assert reader.view.counts() == {}
    finally:
        owner.kill()
        owner.wait()


# Identity pinning (both backends).

def _identity_set(database: Database, key: str, value: str | None) -> None:
    if database.backend == "sqlite":
        conn = sqlite3.connect(database.path)
        with conn:
            if value is None:
                conn.execute(f"DELETE FROM {STORE_TABLE} WHERE key = ?", (key,))
            else:
                conn.execute(f"UPDATE {STORE_TABLE} SET value = ? WHERE key = ?", (value, key))
        conn.close()
        return
    import psycopg

    with psycopg.connect(database.conninfo()) as conn:
        if value is None:
            conn.execute(f"DELETE FROM {database.schema}.{STORE_TABLE} WHERE key = %s", (key,))
        else:
            conn.execute(f"UPDATE {database.schema}.{STORE_TABLE} SET value = %s WHERE key = %s", (value, key))


def test_the_identity_is_recorded_once_and_compared_in_full(migrated: Database) -> None:
    identity = check_store_identity(migrated, OrdersApp.name)
    assert set(identity) >= {"store_id", "app_name", "backend", "schema_version", "codec_version"}
    assert migrate(migrated, OrdersApp).store_id == identity["store_id"], "the store id is written once"
    settings = _settings(migrated, store_id=identity["store_id"])
    with open_store(settings, write=False):
        pass
    other = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(StoreIdentityError, match=f"store id is {identity['store_id']}, OPLEDGER_STORE_ID pins {other}"):
        with open_store(_settings(migrated, store_id=other), write=True):
            pass


def test_a_mismatch_names_every_difference(migrated: Database) -> None:
    _identity_set(migrated, "schema_version", "2")
    with pytest.raises(StoreIdentityError) as caught:
        check_store_identity(migrated, "Other", store_id="x")
    assert set(caught.value.differences) == {"app_name", "store_id", "schema_version"}
    message = str(caught.value)
    assert "belongs to application 'orders'" in message and "run `opledger migrate`" in message
    assert "\n" not in message


def test_another_codec_version_is_refused_at_open_and_by_migrate(migrated: Database) -> None:
    _identity_set(migrated, "codec_version", "2")
    with pytest.raises(StoreIdentityError, match="ledger codec is version 2, this code's is 1"):
        with open_store(_settings(migrated), write=False):
            pass
    with pytest.raises(StoreIdentityError, match="ledger codec is version 2"):
        migrate(migrated, OrdersApp)


def test_a_store_migrated_before_the_codec_was_recorded_opens_and_migrate_records_it(migrated: Database) -> None:
    _identity_set(migrated, "codec_version", None)
    check_store_identity(migrated, OrdersApp.name)
    migrate(migrated, OrdersApp)
    assert check_store_identity(migrated, OrdersApp.name)["codec_version"] == "1"


# Path and permission hardening (SQLite).

def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_files_are_0600_and_the_directory_0700(tmp_path: Path) -> None:
    database = _sqlite(tmp_path)
    assert database.path is not None
    with open_store(_settings(database), write=True) as store:
        store.app.place_order(customer_email="a@example.test", amount_cents=1, payments_url="http://p/1",
                              notify_url="http://p/2")
        files = [database.path] + [Path(f"{database.path}{s}") for s in ("-wal", "-shm", ".lock")]
        assert {f.name: _mode(f) for f in files} == {f.name: 0o600 for f in files}
    assert _mode(database.path.parent) == 0o700


def test_an_older_store_with_loose_modes_is_tightened_by_its_owner(tmp_path: Path) -> None:
    database = _sqlite(tmp_path)
    assert database.path is not None
    lock = Path(f"{database.path}.lock")
    os.chmod(database.path, 0o644)
    os.chmod(lock, 0o644)
    assert [f.status for f in path_findings(database.path) if f.name in ("store file", ".lock file")] == ["warn"] * 2
    with open_store(_settings(database), write=True):
        pass
    assert _mode(database.path) == 0o600 and _mode(lock) == 0o600


def test_a_symlinked_store_file_is_refused(tmp_path: Path) -> None:
    database = _sqlite(tmp_path)
    assert database.path is not None
    link = database.path.parent / "link.db"
    link.symlink_to(database.path)
    with pytest.raises(StorePathError, match="link.db is a symlink"):
        with open_store(Settings(database_url=f"sqlite:///{link}", app=APP), write=False):
            pass
    with pytest.raises(StorePathError, match="is a symlink"):
        migrate(Database.parse(f"sqlite:///{link}"), OrdersApp)
    assert not Path(f"{link}.lock").exists()


def test_a_symlinked_directory_is_refused(tmp_path: Path) -> None:
    database = _sqlite(tmp_path)
    assert database.path is not None
    (tmp_path / "linked").symlink_to(database.path.parent)
    with pytest.raises(StorePathError, match="linked is a symlink"):
        with open_store(Settings(database_url=f"sqlite:///{tmp_path / 'linked' / 'opledger.db'}", app=APP),
                        write=True):
            pass


def test_a_world_writable_directory_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: sticky does not help, anyone may create the lock or WAL first
    with pytest.raises(StorePathError, match="writable by anyone"):
        migrate(Database.parse(f"sqlite:///{shared / 'x.db'}"), OrdersApp)
    assert list(shared.iterdir()) == [], "nothing was created"


def test_a_directory_of_another_user_is_refused(tmp_path: Path, monkeypatch) -> None:
    database = _sqlite(tmp_path)
    monkeypatch.setattr("ledger.store_files.os.geteuid", lambda: os.getuid() + 4242)
    with pytest.raises(StorePathError, match="is owned by uid .*not this user"):
        with open_store(_settings(database), write=False):
            pass


def _read_only_mount_works() -> bool:
    import shutil

    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _read_only_mount_works(), reason="needs `unshare -rm` (user and mount namespaces)")
def test_a_read_only_directory_gives_clear_errors_not_damage(tmp_path: Path) -> None:
    database = _sqlite(tmp_path)
    assert database.path is not None
    directory = database.path.parent
    cli = f"{sys.executable} -m adapters.cli"
    script = (f"mount --bind {directory} {directory} && mount -o remount,bind,ro {directory} && "
              f"{{ {cli} worker; echo worker=$?; {cli} ops list; echo list=$?; {cli} doctor --json; echo doctor=$?; }}")
    env = {**os.environ, "OPLEDGER_DATABASE_URL": database.url(), "OPLEDGER_APP": APP,
           "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "COLUMNS": "300",
           "OPLEDGER_WEBHOOK_SECRET": "whsec_" + "eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHg="}
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=120)
    assert "worker=2" in done.stdout and "list=2" in done.stdout and "doctor=1" in done.stdout, done
    assert "cannot create the store's lock file" in done.stderr and "Read-only file system" in done.stderr
    assert "its directory is read-only for this user" in done.stderr
    assert "damaged" not in done.stderr and "Traceback" not in done.stderr
