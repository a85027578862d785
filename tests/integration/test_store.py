"""Opening the store: migrate once, the schema the code expects, identity checks, the SQLite
single-writer lock (DESIGN §8)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from adapters.demo.orders import OrdersApp
from adapters.runtime import open_store
from ledger.config import Database, Settings
from ledger.errors import ConfigurationError, StoreLockedError
from ledger.persistence import SCHEMA_VERSION, StoreLock, check_store_identity, read_store_identity
from migrations import migrate
from projections.rows import COLUMNS
from tests.apps import ModesApp
from tests.conftest import drop_schema, new_postgres_url, require_postgres


def _columns(database: Database, table: str) -> list[str]:
    if database.backend == "sqlite":
        conn = sqlite3.connect(database.path)
        try:
            return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(database.conninfo()) as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s"
            " ORDER BY ordinal_position", (database.schema, table)).fetchall()
    return [r[0] for r in rows]


def test_migrate_is_idempotent_and_the_schema_matches_the_code(database: Database) -> None:
    first = migrate(database, OrdersApp)
    second = migrate(database, OrdersApp)
    assert first.applied and not second.applied
    assert first.store_id == second.store_id
    assert _columns(database, "opledger_operation_status") == list(COLUMNS)
    identity = check_store_identity(database, OrdersApp.name)
    assert identity["schema_version"] == str(SCHEMA_VERSION)


def test_an_unmigrated_store_is_refused_with_a_hint(database: Database) -> None:
    with pytest.raises(ConfigurationError, match="opledger migrate"):
        read_store_identity(database)


def test_a_store_of_another_application_is_refused(migrated: Database) -> None:
    with pytest.raises(ConfigurationError, match="belongs to application 'orders'"):
        check_store_identity(migrated, ModesApp.name)
    with pytest.raises(ConfigurationError, match="belongs to application"):
        migrate(migrated, ModesApp)


def _set_schema_version(database: Database, version: str) -> None:
    if database.backend == "sqlite":
        conn = sqlite3.connect(database.path)
        with conn:
            conn.execute("UPDATE opledger_store SET value = ? WHERE key = 'schema_version'", (version,))
        conn.close()
    else:
        import psycopg

        with psycopg.connect(database.conninfo()) as conn:
            conn.execute(f"UPDATE {database.schema}.opledger_store SET value = %s WHERE key = 'schema_version'",
                         (version,))


def test_a_store_of_a_newer_schema_is_refused_and_migrate_creates_nothing(migrated: Database) -> None:
    _set_schema_version(migrated, "999")
    with pytest.raises(ConfigurationError, match="schema version 999.*upgrade opledger"):
        check_store_identity(migrated, OrdersApp.name)
    with pytest.raises(ConfigurationError, match="upgrade opledger"):
        migrate(migrated, OrdersApp)


def test_migrate_repairs_an_older_schema_version(migrated: Database) -> None:
    _set_schema_version(migrated, "2")
    with pytest.raises(ConfigurationError, match="schema version 2.*run `opledger migrate`"):
        check_store_identity(migrated, OrdersApp.name)
    assert migrate(migrated, OrdersApp).applied == []  # every migration file already ran
    assert check_store_identity(migrated, OrdersApp.name)["schema_version"] == str(SCHEMA_VERSION)


def test_migrate_refuses_another_applications_store_before_creating_its_tables(migrated: Database) -> None:
    with pytest.raises(ConfigurationError, match="belongs to application"):
        migrate(migrated, ModesApp)
    if migrated.backend == "postgres":
        import psycopg

        with psycopg.connect(migrated.conninfo()) as conn:
            found = conn.execute("SELECT to_regclass(%s)", (f"{migrated.schema}.{ModesApp.name.lower()}_events",))
            assert found.fetchone()[0] is None, "migrate created tables in another application's store"


def test_a_lock_file_that_cannot_be_created_is_a_clear_error(tmp_path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigurationError, match="afile is not a directory"):
        migrate(Database.parse(f"sqlite:///{blocker / 'x.db'}"), OrdersApp)


def test_one_process_owns_a_sqlite_store_and_others_may_read(tmp_path) -> None:
    database = Database.parse(f"sqlite:///{tmp_path / 'x.db'}")
    migrate(database, OrdersApp)
    settings = Settings(database_url=f"sqlite:///{database.path}", app="adapters.demo.orders:OrdersApp")
    with open_store(settings, write=True) as owner:
        owner.app.place_order(customer_email="a@example.test", amount_cents=1, payments_url="http://p/1",
                              notify_url="http://p/2")
        StoreLock(database.path).acquire().release()  # holders in the owning process share it
        other = subprocess.run(
            [sys.executable, "-c", "import sys; from ledger.persistence import StoreLock; "
             "from pathlib import Path; StoreLock(Path(sys.argv[1])).acquire()", str(database.path)],
            capture_output=True, text=True)
        assert other.returncode != 0 and "StoreLockedError" in other.stderr
        with open_store(settings, write=False) as reader:
            assert reader.view.counts() == {}  # nothing projected yet, but readable
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                conn = sqlite3.connect(f"file:{database.path}?mode=ro", uri=True)
                conn.execute("DELETE FROM opledger_store")
    released = subprocess.run(
        [sys.executable, "-c", "import sys; from ledger.persistence import StoreLock; "
         "from pathlib import Path; StoreLock(Path(sys.argv[1])).acquire()", str(database.path)])
    assert released.returncode == 0, "the lock goes with its last holder"


def test_an_application_cannot_write_a_store_another_process_owns(tmp_path) -> None:
    database = Database.parse(f"sqlite:///{tmp_path / 'x.db'}")
    migrate(database, OrdersApp)
    owner = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from ledger.persistence import StoreLock; "
         "from pathlib import Path; StoreLock(Path(sys.argv[1])).acquire(); print('ready', flush=True); "
         "time.sleep(60)", str(database.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError, match=f"pid {owner.pid}"):
            OrdersApp(env=database.library_env(create_table=False))
        reader = OrdersApp(env=database.library_env(create_table=False, read_only=True))
        reader.close()
    finally:
        owner.kill()
        owner.wait()


@pytest.mark.postgres
def test_a_schema_named_like_a_postgres_keyword_is_refused_before_anything_is_created() -> None:
    from tests.conftest import PG_URL, require_postgres

    require_postgres()
    with pytest.raises(ConfigurationError, match="is a PostgreSQL keyword"):
        migrate(Database.parse(f"{PG_URL}?schema=select"), OrdersApp)


def test_a_directory_given_as_the_store_is_refused_without_leaving_a_lock_file(tmp_path) -> None:
    directory = tmp_path / "adir"
    directory.mkdir()
    with pytest.raises(ConfigurationError, match="is a directory"):
        migrate(Database.parse(f"sqlite:///{directory}"), OrdersApp)
    assert not (tmp_path / "adir.lock").exists()



@pytest.mark.postgres
def test_text_originator_ids_are_refused_with_a_clear_error() -> None:
    require_postgres()
    url, schema = new_postgres_url()
    try:
        env = {**Database.parse(url).library_env(create_table=True), "ORIGINATOR_ID_TYPE": "text"}
        with pytest.raises(ConfigurationError, match="ORIGINATOR_ID_TYPE=text is not supported"):
            OrdersApp(env=env)
    finally:
        drop_schema(schema)


def test_a_release_run_by_the_garbage_collector_inside_acquire_does_not_deadlock(tmp_path: Path) -> None:
    # Taking the lock allocates, so the collector may run an unreachable application's
    # ``__del__`` (which closes it, releasing its lock) inside ``acquire``, on the same thread.
    other = StoreLock(tmp_path / "other.db").acquire()
    lock = StoreLock(tmp_path / "store.db")
    real = lock._lock_file

    def lock_file() -> int:
        other.release()  # what that ``__del__`` does
        return real()

    lock._lock_file = lock_file  # type: ignore[method-assign]
    thread = threading.Thread(target=lock.acquire, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "acquire deadlocked on a release from inside it"
    lock.release()
