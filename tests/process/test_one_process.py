"""``opledger worker --serve``: the worker and the HTTP server in one process (issue 27 item 5).
A provider's signed callback is accepted while the worker is in the middle of other calls and
every operation settles, on the embedded SQLite store, where a second writer process is still
refused, and on PostgreSQL alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from uuid import UUID

import httpx
import pytest

from adapters.partner import start_partner_process
from adapters.processes import ServeProcess, free_port, spawn_serve
from ledger.config import Database
from ledger.declarations import DeliveryMode
from tests.apps import PatientModesApp
from tests.callback_desk import CALLBACK_SECRET, all_delivered
from tests.conftest import SECRET, wait_until
from tests.process.conftest import REPO, spawning, worker_env

APP = "tests.apps:PatientModesApp"
SLOW_SECONDS = 2.0


@pytest.fixture
def store(database_url: str) -> Database:
    from tests.stores import migrated_store

    database = Database.parse(database_url)
    migrated_store(database, PatientModesApp)
    return database


@pytest.fixture
def one_process(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    yield from spawning(spawn_serve, tmp_path, "worker-serve", command=("worker", "--serve"))


def history(db: Database, ids: list[UUID]) -> dict[UUID, list[tuple[str, object]]]:
    app = PatientModesApp(env=db.library_env(create_table=False, read_only=db.backend == "sqlite"))  # beside the owner
    try:
        return {op_id: [(type(e).__name__, e.timestamp) for e in app.events.get(op_id)] for op_id in ids}
    finally:
        app.close()


def test_callbacks_and_execution_in_one_process_on_sqlite(store: Database, tmp_path: Path,
                                                          one_process: Callable[..., ServeProcess]) -> None:
    with start_partner_process(log_path=tmp_path / "partner.db", secret=SECRET,
                               callback_secret=CALLBACK_SECRET) as partner:
        httpx.post(f"{partner.url}/_control/faults",
                   json={"path": "/slow", "fault": {"delay": SLOW_SECONDS}}).raise_for_status()
        app = PatientModesApp(env=store.library_env(create_table=False))
        try:  # written before the worker owns the store
            slow = [app.make(DeliveryMode.IDEMPOTENT, partner.url + "/slow", n=n) for n in range(4)]
            called_back = [app.make(DeliveryMode.CALLBACK, partner.url + "/provision", n=10 + n) for n in range(2)]
        finally:
            app.close()
        port = free_port()  # the partner calls back on this process's own port
        served = one_process(worker_env(store.url(), app=APP, OPLEDGER_CALLBACK_BASE_URL=f"http://127.0.0.1:{port}",
                                        OPLEDGER_SECRET_CALLBACK_TEST_CALLBACK=CALLBACK_SECRET), port=port)
        ids = slow + called_back
        wait_until(lambda: all(names[-1][0] == "Settled" for names in history(store, ids).values()), timeout=60,
                   what="every operation settled")
        wait_until(all_delivered(partner.log), timeout=60, what="the partner saw every callback delivered")
        recorded = history(store, ids)
        for op_id in called_back:
            names = [name for name, _ in recorded[op_id]]
            assert names.count("CallbackReceived") == 1 and names.count("Settled") == 1, names
        assert {status for _, _, status in partner.log.callback_sends()} == {200}
        for op_id in slow:
            assert partner.log.applied_count(op_id) == 1
        # A callback was recorded while a slow call of this same process was in flight.
        received = [t for op_id in called_back for name, t in recorded[op_id] if name == "CallbackReceived"]
        in_flight = [(dict(recorded[op_id])["AttemptStarted"], dict(recorded[op_id])["Succeeded"]) for op_id in slow]
        assert any(start < t < end for t in received for start, end in in_flight), (received, in_flight)
        if store.backend == "sqlite":
            assert_a_second_writer_is_refused(store)
        assert served.alive()
        assert served.terminate() == 0


def assert_a_second_writer_is_refused(store: Database) -> None:
    """Still one writer on SQLite: a second worker process is refused while one owns the store."""
    second = subprocess.run([sys.executable, "-m", "adapters.cli", "worker"], cwd=REPO, capture_output=True,
                            text=True, timeout=60, env={**os.environ, **worker_env(store.url(), app=APP)})
    assert second.returncode == 2 and "another process" in second.stdout + second.stderr, second
