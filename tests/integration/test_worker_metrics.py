"""The metrics projection keeps up with a running worker: on SQLite the worker (the store's one
owner) keeps it; on PostgreSQL `opledger serve` does (started here as serve starts it)."""

from __future__ import annotations

import threading
from collections import defaultdict

from ledger.config import Database, Settings
from projections.metrics_store import MetricsStore
from projections.views import open_view
from tests.apps import FakeApp
from tests.conftest import wait_until
from tests.stores import migrated_store


def test_a_worker_keeps_the_metrics(database: Database, database_url: str) -> None:
    from adapters.runtime import run_worker

    migrated_store(database, FakeApp)
    app = FakeApp(env=database.library_env(create_table=False))
    stop = threading.Event()
    settings = Settings(database_url=database_url, app="tests.apps:FakeApp", poll_interval_seconds=0.05)
    worker = threading.Thread(target=run_worker, args=(settings,), kwargs={"stop": stop}, daemon=True)
    view = open_view(database)
    try:
        for n in range(3):
            app.make(f"ok-{n}")
        worker.start()
        if database.backend == "postgres":  # as `opledger serve` runs it
            from adapters.followers import follow_metrics

            follow_metrics(database, app, stop, holder="serve-test")

        def counters() -> dict[str, float]:
            found: dict[str, float] = defaultdict(float)
            for (name, *_), value in MetricsStore(view).totals().items():
                found[name] += value
            return found

        wait_until(lambda: counters().get("opledger_settled") == 3, timeout=30, what="three settled in the metrics")
        found = counters()
        assert found["opledger_operations_intended"] == 3 and found["opledger_attempts"] == 3
        assert found["opledger_claim_latency_seconds_count"] == 3
    finally:
        stop.set()
        worker.join(timeout=15)
        view.close()
        app.close()
    assert not worker.is_alive()
