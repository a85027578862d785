"""Every metric and label the shipped monitors name is on ``/metrics`` of a seeded store, on both
backends; and ``/metrics`` fails when the store cannot be read, which is what makes Prometheus's
``up`` the store's health (``OpledgerTargetDown``).

Source: DESIGN §9 ("Monitors"); issue 31 item 3.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from ledger.receipts import Receipt
from projections.metrics import MetricsProjection
from projections.metrics_store import MetricsStore
from tests.desk import Desk, desk
from tests.monitoring import as_promql, dashboard_queries, rule_expressions, rules, unexposed


def _stuck_receipt(d: Desk) -> None:
    """A keyed command's receipt recovery gave up on (``opledger_receipts_stuck``), folded."""
    clock = d.clock
    receipt = Receipt.open(principal="vera", scope="request_refund", key="k", owner="serve:gone", now=clock.now(),
                           lease_seconds=5, request={"route": "r", "command": "request_refund", "principal": "vera",
                                                     "body": {}, "body_error": None})
    receipt.release(epoch=1, reason="RuntimeError", now=clock.now())
    receipt.stop_recovery(adoptions=0, now=clock.now())
    d.store.app.save(receipt)
    MetricsProjection(app=d.store.app, store=MetricsStore(d.store.view)).catch_up()


def test_every_metric_and_label_the_rules_and_the_dashboard_name_is_on_metrics(database_url: str) -> None:
    with desk(database_url) as d, TestClient(d.app) as client:
        _stuck_receipt(d)
        response = client.get("/metrics")
    assert response.status_code == 200
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    expressions = rule_expressions() + [(where, as_promql(query)) for where, query in dashboard_queries()]
    assert unexposed(expressions, response.text, recorded=recorded) == []


@pytest.mark.parametrize(("error", "status"), [
    (psycopg.OperationalError("server closed the connection unexpectedly"), 503),  # an outage
    (sqlite3.OperationalError("no such table: opledger_operation_status"), 500),  # a damaged store
])
def test_metrics_fails_when_the_store_cannot_be_read(tmp_path: Path, error: Exception, status: int) -> None:
    def unreadable() -> None:
        raise error

    with desk(f"sqlite:///{tmp_path / 'store' / 'opledger.db'}") as d, \
            TestClient(d.app, raise_server_exceptions=False) as client:
        d.app.state.collector.store.gauges = unreadable
        assert client.get("/metrics").status_code == status
