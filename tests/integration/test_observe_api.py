"""The HTTP observe API, operator actions and /metrics on both backends (TestClient, in process)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.desk import Desk, auth, desk
from tests.observe_seed import CANARY_INTERNAL, CANARY_SECRET, EXPECTED_COUNTERS

PROBLEM = "application/problem+json"


@pytest.fixture
def served(database_url: str) -> Iterator[tuple[Desk, TestClient]]:
    with desk(database_url) as d, TestClient(d.app) as client:
        yield d, client


def counters(text: str) -> dict[tuple[str, str, str], float]:
    found: dict[tuple[str, str, str], float] = defaultdict(float)
    details = ("outcome", "category", "reason")
    for family in text_string_to_metric_families(text):
        if family.type != "counter":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.value:
                detail = next((sample.labels[k] for k in details if k in sample.labels), "")
                found[(family.name, sample.labels["integration"], detail)] += sample.value
    return dict(found)


def test_health_and_metrics_count_the_scripted_run(served: tuple[Desk, TestClient]) -> None:
    d, client = served
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    expected = dict(EXPECTED_COUNTERS)
    expected[("opledger_operations_intended", "refunds.issue", "")] = 1
    assert counters(response.text) == expected
    assert 'opledger_operations{delivery_mode="idempotent",integration="payments.charge",status="pending",' \
           'tenant="default"} 4.0' in response.text
    assert 'opledger_attention{delivery_mode="non_idempotent",integration="notifications.send",' \
           'reason="ambiguous",tenant="default"} 1.0' in response.text
    assert "opledger_claim_latency_seconds_bucket" in response.text
    assert "opledger_oldest_pending_age_seconds" in response.text


def test_tenants_beyond_the_top_n_fold_into_other(database_url: str) -> None:
    with desk(database_url, top_tenants=1) as d, TestClient(d.app) as client:
        text = client.get("/metrics").text
    assert 'tenant="acme"' not in text and 'tenant="other"' in text and 'tenant="default"' in text


def test_list_filters_and_cursor_pages(served: tuple[Desk, TestClient]) -> None:
    d, client = served
    failed = client.get("/v1/operations", params={"status": "failed"}, headers=auth("viewer")).json()
    assert {item["operation_id"] for item in failed["items"]} == {str(d.ids["failure"]), str(d.ids["budget"])}
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 5, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/operations", params=params, headers=auth("viewer")).json()
        seen += [item["operation_id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 17
    by_tenant = client.get("/v1/operations", params={"tenant": "acme"}, headers=auth("viewer")).json()
    assert [item["operation_id"] for item in by_tenant["items"]] == [str(d.ids["refund"])]


def test_detail_timeline_queues_and_entity(served: tuple[Desk, TestClient]) -> None:
    d, client = served
    failure = client.get(f"/v1/operations/{d.ids['failure']}", headers=auth("viewer")).json()
    assert (failure["status"], failure["execution"], failure["settlement"], failure["outcome"]) == \
        ("settled", "failed", "settled", "failed")
    assert failure["source"]["action"] == "adapters.demo.orders:Order.on_payment"
    refund = client.get(f"/v1/operations/{d.ids['refund']}", headers=auth("viewer")).json()
    assert refund["approval"] == "required" and refund["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    # The chain of authority and the settled outcome (issue 32 item 4).
    assert refund["authority"]["principal_chain"] == ["system"] and refund["authority"]["source_action"]
    assert refund["authority"]["integration_digest"].startswith("sha256:") and refund["settles"] is None
    assert failure["settles"]["epoch"] >= 1 and failure["settles"]["attempt_id"]
    timeline = client.get(f"/v1/operations/{d.ids['retry']}/timeline", headers=auth("viewer")).json()
    assert [e["event"] for e in timeline] == ["Intended", "Claimed", "AttemptStarted", "RetryScheduled", "Claimed",
                                              "AttemptStarted", "Succeeded"]
    attention = client.get("/v1/attention", headers=auth("viewer")).json()
    assert str(d.ids["ambiguous"]) in [row["operation_id"] for row in attention]
    approvals = client.get("/v1/approvals", headers=auth("viewer")).json()
    assert [row["operation_id"] for row in approvals["items"]] == [str(d.ids["refund"])]
    source = refund["source"]
    entity = client.get(f"/v1/entities/{source['entity_type']}/{source['entity_id']}/operations",
                        headers=auth("viewer")).json()
    assert [row["operation_id"] for row in entity["items"]] == [str(d.ids["refund"])]


ACTIONS = {  # action: (path, body, the case it applies to, the role it needs)
    "resolve": ("resolve", {"resolution": "succeeded", "evidence": "partner log"}, "ambiguous", "operator"),
    "cancel": ("cancel", {"reason": "not needed"}, "pending", "operator"),
    "retry_settlement": ("retry-settlement", {"evidence": "order unarchived"}, "blocked", "operator"),
    "approve": ("approve", {}, "refund", "approver"),
    "deny": ("deny", {"reason": "too large"}, "refund", "approver"),
}


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("role", ["viewer", "operator", "approver"])
def test_each_role_against_each_action(database_url: str, action: str, role: str) -> None:
    path, body, case, needed = ACTIONS[action]
    with desk(database_url) as d, TestClient(d.app) as client:
        url = f"/v1/operations/{d.ids[case]}/{path}"
        assert client.post(url, json=body).status_code == 401
        assert client.post(url, json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
        response = client.post(url, json=body, headers=auth(role))
        if role == needed:
            assert response.status_code == 200, response.text
            recorded = response.json()["recorded"]
            assert recorded and recorded[0]["details"]["principal"] == {"operator": "otto", "approver": "anna"}[role]
        else:
            assert response.status_code == 403
            assert response.headers["content-type"] == PROBLEM


def test_retry_settlement_needs_a_blocked_settlement(served: tuple[Desk, TestClient]) -> None:
    d, client = served
    response = client.post(f"/v1/operations/{d.ids['success']}/retry-settlement", json={"evidence": "fixed"},
                           headers=auth("operator"))
    assert response.status_code == 409
    assert response.json()["detail"].startswith("cannot retry the settlement: the operation is")


def test_errors_are_problem_json_in_the_users_words(served: tuple[Desk, TestClient]) -> None:
    d, client = served
    cases = [
        (client.get("/v1/operations/00000000-0000-0000-0000-000000000000", headers=auth("viewer")), 404),
        (client.get("/v1/operations/not-a-uuid", headers=auth("viewer")), 422),
        (client.get("/v1/operations", params={"cursor": "garbage"}, headers=auth("viewer")), 400),
        (client.get("/v1/operations", params={"since": "2026-01-01T00:00:00"}, headers=auth("viewer")), 422),
        (client.get("/v1/nothing-here"), 404),
        (client.post(f"/v1/operations/{d.ids['success']}/approve", headers=auth("approver")), 409),
    ]
    for response, status in cases:
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == PROBLEM
        assert response.json()["status"] == status
    assert cases[-1][0].json()["detail"] == "cannot approve: the operation is already succeeded"


def test_no_canary_in_any_response(served: tuple[Desk, TestClient]) -> None:
    d, client = served
    bodies = [client.get("/metrics").text, client.get("/console").text]
    for path in ("/v1/operations?limit=500", "/v1/attention", "/v1/approvals",
                 f"/v1/operations/{d.ids['refund']}", f"/v1/operations/{d.ids['refund']}/timeline"):
        bodies.append(client.get(path, headers=auth("viewer")).text)
    for body in bodies:
        assert CANARY_INTERNAL not in body and CANARY_SECRET not in body and "CANARY" not in body


def test_metrics_are_identical_after_a_rebuild(served: tuple[Desk, TestClient]) -> None:
    from projections.metrics import MetricsProjection
    from projections.metrics_store import MetricsStore
    from projections.status import StatusProjection

    d, client = served
    before = client.get("/metrics").text
    StatusProjection(app=d.store.app, view=d.store.view).rebuild()
    MetricsProjection(app=d.store.app, store=MetricsStore(d.store.view)).rebuild()
    assert client.get("/metrics").text == before


def test_a_read_only_server_refuses_actions_and_says_why(database_url: str) -> None:
    with desk(database_url, writable=False) as d, TestClient(d.app) as client:
        assert client.get("/health").json()["writable"] is False
        response = client.post(f"/v1/operations/{d.ids['refund']}/approve", headers=auth("approver"))
        assert response.status_code == 409 and "read-only" in response.json()["detail"]
        assert client.get(f"/v1/operations/{d.ids['refund']}", headers=auth("viewer")).json()["approval"] == "required"


def test_a_store_outage_is_a_retryable_503_not_a_500(served: tuple[Desk, TestClient],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg

    d, client = served

    def unreachable(*args: object, **kwargs: object) -> None:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(type(d.app.state.store.view), "counts", unreachable)
    response = client.get("/health")
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1"
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["title"] == "Store unavailable"
    monkeypatch.undo()
    assert client.get("/health").status_code == 200
