"""Fixtures for tests that run real processes: the partner, worker processes, waiting."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from adapters.processes import WorkerProcess, spawn_worker
from ledger.config import Database
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


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start worker processes; all are killed at the end of the test."""
    started: list[WorkerProcess] = []

    def start(env: dict[str, str]) -> WorkerProcess:
        process = spawn_worker(env, tmp_path / f"worker-{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def read_only_env(database: Database) -> dict[str, str]:
    return database.library_env(create_table=False, read_only=database.backend == "sqlite")
