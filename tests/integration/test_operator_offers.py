"""What the API offers an operator (issue 31 item 5): who the token is (``/v1/me``), the actions an
operation's detail offers to the requesting token (and those withheld, with why), and the link
to its trace. Every offered action is accepted by its route; every other one is refused or
records nothing. And the console's page and files, served under its Content-Security-Policy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adapters.http.app import ServeSettings, load_serve_settings
from adapters.http.auth import TokenGrant
from adapters.http.operator_view import check_trace_template, trace_link
from ledger.errors import ConfigurationError
from tests.desk import TOKENS, Desk, auth, desk

JAEGER = "https://jaeger.example/trace/{trace_id}"
ROUTES = {"resolve": "resolve", "retry_settlement": "retry-settlement", "cancel": "cancel", "approve": "approve",
          "deny": "deny"}


def _body(action: str, resolutions: list[str]) -> dict[str, Any]:
    return {"resolve": {"resolution": (resolutions or ["succeeded"])[0], "evidence": "checked the partner"},
            "retry_settlement": {"evidence": "order unarchived"}, "cancel": {"reason": "not needed"},
            "approve": {}, "deny": {"reason": "too large"}}[action]


@pytest.fixture
def served(database_url: str) -> Iterator[tuple[Desk, TestClient]]:
    with desk(database_url, trace_url_template=JAEGER) as d, TestClient(d.app) as client:
        yield d, client


def _detail(client: TestClient, op_id: object, role: str = "all") -> dict[str, Any]:
    response = client.get(f"/v1/operations/{op_id}", headers=auth(role))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_me_names_the_principal_roles_and_their_actions(served: tuple[Desk, TestClient]) -> None:
    _, client = served
    assert client.get("/v1/me", headers=auth("viewer")).json() == {
        "principal": "vera", "roles": ["viewer"], "actions": [], "writable": True}
    assert client.get("/v1/me", headers=auth("operator")).json()["actions"] == ["resolve", "retry_settlement",
                                                                                 "cancel"]
    assert client.get("/v1/me", headers=auth("approver")).json()["actions"] == ["approve", "deny"]
    refused = client.get("/v1/me", headers={"Authorization": "Bearer wrong-token-0000000"})
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"


def test_offers_follow_the_state_and_the_role(served: tuple[Desk, TestClient]) -> None:
    d, client = served
    ambiguous = _detail(client, d.ids["ambiguous"], "operator")
    assert ambiguous["actions"] == [{"action": "resolve", "resolutions": ["succeeded", "failed", "retry", "abandon"]}]
    viewer = _detail(client, d.ids["ambiguous"], "viewer")
    assert viewer["actions"] == []
    assert viewer["withheld"] == [{"action": "resolve", "reason": "needs the operator role; vera has viewer"}]
    refund = d.ids["refund"]
    assert [a["action"] for a in _detail(client, refund, "approver")["actions"]] == ["approve", "deny"]
    assert [a["action"] for a in _detail(client, refund, "operator")["actions"]] == ["cancel"]
    assert [a["action"] for a in _detail(client, d.ids["blocked"], "operator")["actions"]] == \
        ["resolve", "retry_settlement"]
    assert _detail(client, d.ids["success"])["actions"] == []  # succeeded, settled by nobody yet: nothing to do


def test_every_offered_action_is_accepted_and_every_other_refused(served: tuple[Desk, TestClient]) -> None:
    d, client = served
    for case, op_id in d.ids.items():
        offered = {a["action"]: a["resolutions"] for a in _detail(client, op_id)["actions"]}
        for action, route in ROUTES.items():
            if action in offered:
                continue
            response = client.post(f"/v1/operations/{op_id}/{route}", json=_body(action, []), headers=auth("all"))
            # refused, or (a second cancellation request) accepted with nothing recorded
            assert response.status_code == 409 or response.json()["recorded"] == [], (case, action, response.text)
        if offered:
            action, resolutions = next(iter(offered.items()))
            response = client.post(f"/v1/operations/{op_id}/{ROUTES[action]}", json=_body(action, resolutions),
                                   headers=auth("all"))
            assert response.status_code == 200, (case, action, response.text)
            assert response.json()["recorded"], (case, action)


def test_approval_policy_and_a_read_only_server_withhold_actions(database_url: str) -> None:
    tokens = {**TOKENS, "self-approver-token": TokenGrant(principal="system", roles=["approver"])}
    with desk(database_url, tokens=tokens) as d, TestClient(d.app) as client:
        own = _detail(client, d.ids["refund"], "self-approver")
        assert [a["action"] for a in own["actions"]] == ["deny"]
        withheld = {w["action"]: w["reason"] for w in own["withheld"]}
        assert "self-approval" in withheld["approve"] and withheld["cancel"].startswith("needs the operator role")
    with desk(database_url, writable=False) as d, TestClient(d.app) as client:
        read_only = _detail(client, d.ids["refund"], "approver")
        withheld = {w["action"]: w["reason"] for w in read_only["withheld"]}
        assert read_only["actions"] == [] and set(withheld) == {"approve", "deny", "cancel"}
        assert "read-only" in withheld["approve"] and "read-only" in withheld["deny"]
        assert client.get("/v1/me", headers=auth("approver")).json()["writable"] is False


def test_the_trace_links_to_the_configured_tracing_ui(served: tuple[Desk, TestClient]) -> None:
    d, client = served
    assert _detail(client, d.ids["refund"])["trace_url"] == \
        "https://jaeger.example/trace/4bf92f3577b34da6a3ce929d0e0e4736"
    assert _detail(client, d.ids["success"])["trace_url"] is None  # no trace recorded


def test_a_trace_template_is_checked_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    assert trace_link("", "abc") is None and trace_link(JAEGER, None) is None
    assert check_trace_template("") == ""
    for bad, said in [("jaeger.example/trace/{trace_id}", "http"), ("https://jaeger.example/trace/", "{trace_id}"),
                      ("javascript:alert({trace_id})", "http"), ("https:///trace/{trace_id}", "host"),
                      ("https://jaeger.example/trace/{trace_id} ", "white space"),
                      ("https://jaeger.example/a b/{trace_id}", "white space"),
                      ("https://jaeger.example/\x07/{trace_id}", "control")]:
        with pytest.raises(ValueError, match=said):
            check_trace_template(bad)
        monkeypatch.setenv("OPLEDGER_TRACE_URL_TEMPLATE", bad)
        with pytest.raises(ConfigurationError, match="OPLEDGER_TRACE_URL_TEMPLATE"):
            load_serve_settings()
    monkeypatch.setenv("OPLEDGER_TRACE_URL_TEMPLATE", JAEGER)
    assert ServeSettings().trace_url_template == JAEGER


def test_the_console_and_every_script_it_loads_are_served_under_its_policy() -> None:
    import re

    from adapters.http.app import build_app

    client = TestClient(build_app())
    page = client.get("/console")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy and "unsafe" not in policy
    assert " style=" not in page.text and not re.search(r"<script(?![^>]*\ssrc=)", page.text)  # nothing inline
    assets = re.findall(r'(?:src|href)="/console/([^"]+)"', page.text)
    assert len(assets) == 6  # four scripts, the stylesheet and the tab's icon (no 404 on every visit)
    for name in assets:
        response = client.get(f"/console/{name}")
        kind = {"css": "text/css", "svg": "image/svg+xml"}.get(name.rsplit(".", 1)[-1], "text/javascript")
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind), name
    assert client.get("/console/console.html").status_code == 404
    assert client.get("/console/..%2Fconsole.py").status_code == 404
