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

from tests.desk import desk
from tests.monitoring import as_promql, dashboard_queries, rule_expressions, rules, unexposed


def test_every_metric_and_label_the_rules_and_the_dashboard_name_is_on_metrics(database_url: str) -> None:
    with desk(database_url) as d, TestClient(d.app) as client:
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
