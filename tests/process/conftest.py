"""Fixtures for tests that run real processes: the partner, worker processes, waiting."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import pytest

from adapters.partner import PartnerLog
from adapters.processes import ChildProcess, WorkerProcess, spawn_worker
from ledger.application import LedgerApplication
from ledger.config import Database
from ledger.operation import Operation
from tests.conftest import SECRET

REPO = Path(__file__).resolve().parents[2]


def worker_env(database_url: str, *, app: str, lease_seconds: float = 1.0, **extra: str) -> dict[str, str]:
    """Settings for a worker process in a test."""
    return {
        "OPLEDGER_DATABASE_URL": database_url,
        "OPLEDGER_APP": app,
        "OPLEDGER_LEASE_SECONDS": str(lease_seconds),
        "OPLEDGER_WEBHOOK_SECRET": SECRET,
        "OPLEDGER_POLL_INTERVAL_SECONDS": "0.05",
        "OPLEDGER_SECRET_TEST_TOKEN": "tok_test_secret_value",
        "OPLEDGER_SECRET_DEMO_CARD": "tok_demo_secret_value",
        "OPLEDGER_LOG_FORMAT": "json",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        **extra,
    }


P = TypeVar("P", bound=ChildProcess)


def spawning(spawn: Callable[..., P], tmp_path: Path, stem: str, **fixed: Any) -> Iterator[Callable[..., P]]:
    """The body of a fixture that starts child processes (``yield from spawning(...)``): yields
    ``start(env, **options)``, which runs ``spawn(env, log_path, **fixed, **options)`` with the
    log at ``tmp_path/<stem>-<n>.log`` and returns the process; kills every one started at the end."""
    started: list[P] = []

    def start(env: dict[str, str], **options: Any) -> P:
        started.append(spawn(env, tmp_path / f"{stem}-{len(started)}.log", **fixed, **options))
        return started[-1]

    yield start
    for process in started:
        process.kill()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start worker processes; all are killed at the end of the test."""
    yield from spawning(spawn_worker, tmp_path, "worker")


def read_only_env(database: Database) -> dict[str, str]:
    return database.library_env(create_table=False, read_only=database.backend == "sqlite")


def load_operation(app_class: type[LedgerApplication], db: Database, op_id: UUID) -> Operation:
    """Operation ``op_id`` as ``app_class`` reads it from ``db`` now, opened beside the running
    processes (read-only on SQLite) and closed again."""
    app = app_class(env=read_only_env(db))
    try:
        return app.get_operation(op_id)
    finally:
        app.close()


def signed_deliveries(log: PartnerLog, op_id: UUID) -> list[Any]:
    """The partner's logged deliveries of operation ``op_id`` whose signature it found valid."""
    return [r for r in log.requests(str(op_id)) if r.kind == "delivery" and r.signature_valid]


def run_cli(database_url: str, app: str, *args: str, failpoint: str | None = None,
            module: str = "adapters.cli") -> subprocess.CompletedProcess[str]:
    """Run ``python -m MODULE ARGS...`` (``opledger ARGS...`` by default) on the store at
    ``database_url`` for application ``app``, armed with ``failpoint`` (``ledger.failpoints``)
    when given; its output captured as text, within 120 s."""
    env = {**os.environ, "OPLEDGER_DATABASE_URL": database_url, "OPLEDGER_APP": app, "PYTHONPATH": str(REPO)}
    env.pop("OPLEDGER_FAILPOINT", None)
    if failpoint:
        env["OPLEDGER_FAILPOINT"] = failpoint
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True,
                          timeout=120)
