"""Every route bounded before it is parsed (issue 27 items 1-2), in process on both backends:
anonymous requests are refused unread, bodies over their route's limit are 413 however they are
framed, action bodies are read strictly, and nothing is recorded for a refused one. The same
against a real ``opledger serve`` with 200 MB bodies is ``tests/process/test_serve_hostile.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adapters.http.guard import ACTION_MAX_BODY_BYTES, CALLBACK_MAX_BODY_BYTES, OPEN_MAX_BODY_BYTES, RequestGuard
from tests.desk import Desk, auth, desk

PROBLEM = "application/problem+json"
ACTIONS = {"resolve": {"resolution": "abandon", "evidence": "checked"}, "retry-settlement": {"evidence": "fixed"},
           "cancel": {"reason": "no"}, "approve": {}, "deny": {"reason": "no"}}
ROLE = {"resolve": "operator", "retry-settlement": "operator", "cancel": "operator", "approve": "approver",
        "deny": "approver"}


@pytest.fixture
def served(database_url: str) -> Iterator[tuple[Desk, TestClient]]:
    with desk(database_url) as d, TestClient(d.app) as client:
        yield d, client


def timeline_length(d: Desk, client: TestClient, name: str) -> int:
    return len(client.get(f"/v1/operations/{d.ids[name]}/timeline", headers=auth("viewer")).json())


def chunked(total: int) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        yield b"x" * 4096
        sent += 4096


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_an_anonymous_action_is_401_whatever_its_body(served: tuple[Desk, TestClient], action: str) -> None:
    d, client = served
    url = f"/v1/operations/{d.ids['refund']}/{action}"
    for kwargs in ({"content": b'{"reason":'}, {"content": chunked(10 * ACTION_MAX_BODY_BYTES)},
                   {"content": b"{}", "headers": {"Content-Length": str(10**9)}},
                   {"json": ACTIONS[action], "headers": {"Authorization": "Bearer not-a-configured-token"}}):
        response = client.post(url, **kwargs)  # type: ignore[arg-type]
        assert response.status_code == 401, response.text
        assert response.headers["content-type"] == PROBLEM and response.headers["www-authenticate"] == "Bearer"
        assert response.headers["connection"] == "close"


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_an_oversized_action_body_is_413_and_records_nothing(served: tuple[Desk, TestClient], action: str) -> None:
    d, client = served
    url = f"/v1/operations/{d.ids['refund']}/{action}"
    before = timeline_length(d, client, "refund")
    headers = auth(ROLE[action])
    declared = client.post(url, content=b"{}", headers={**headers, "Content-Length": str(ACTION_MAX_BODY_BYTES + 1)})
    streamed = client.post(url, content=chunked(ACTION_MAX_BODY_BYTES + 4096), headers=headers)
    for response in (declared, streamed):
        assert response.status_code == 413, response.text
        assert response.json()["code"] == "body_too_large" and f"{ACTION_MAX_BODY_BYTES:,} bytes" in response.json()["detail"]
    assert timeline_length(d, client, "refund") == before


@pytest.mark.parametrize("body", [b'{"reason":', b'{"unknown": 1}', b"[]", b'"text"', b"\xff\xfe"])
def test_approve_with_a_malformed_body_is_422_and_approves_nothing(served: tuple[Desk, TestClient],
                                                                  body: bytes) -> None:
    d, client = served
    url = f"/v1/operations/{d.ids['refund']}/approve"
    response = client.post(url, content=body, headers={**auth("approver"), "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    assert client.get(f"/v1/operations/{d.ids['refund']}", headers=auth("viewer")).json()["approval"] == "required"
    assert client.post(url, headers=auth("approver")).status_code == 200  # no body at all: approved
    assert client.get(f"/v1/operations/{d.ids['refund']}", headers=auth("viewer")).json()["approval"] == "granted"


@pytest.mark.parametrize(("action", "body"), [
    ("resolve", {"resolution": "abandon", "evidence": "checked", "extra": True}),
    ("resolve", {"resolution": "abandon", "evidence": 42}),
    ("cancel", {"reason": ["a", "list"]}),
    ("deny", {"reason": 7}),
    ("retry-settlement", {"evidence": None}),
])
def test_action_bodies_are_read_strictly(served: tuple[Desk, TestClient], action: str, body: dict[str, Any]) -> None:
    d, client = served
    target = "ambiguous" if action == "resolve" else "refund"
    before = timeline_length(d, client, target)
    response = client.post(f"/v1/operations/{d.ids[target]}/{action}", json=body, headers=auth("all"))
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    assert timeline_length(d, client, target) == before


def test_a_callback_without_signature_headers_is_401_unread(served: tuple[Desk, TestClient]) -> None:
    _, client = served
    response = client.post("/callbacks/anything", content=chunked(10 * CALLBACK_MAX_BODY_BYTES))
    assert response.status_code == 401 and "webhook-id" in response.json()["detail"]
    signed = {"webhook-id": "msg_1", "webhook-timestamp": "1", "webhook-signature": "v1,AAAA"}
    oversized = client.post("/callbacks/anything", content=chunked(2 * CALLBACK_MAX_BODY_BYTES), headers=signed)
    assert oversized.status_code == 413


def test_open_routes_take_no_large_body(served: tuple[Desk, TestClient]) -> None:
    _, client = served
    assert client.request("GET", "/health", content=chunked(2 * OPEN_MAX_BODY_BYTES)).status_code == 413
    assert client.get("/health").status_code == 200


def test_an_undeclared_method_is_still_405(served: tuple[Desk, TestClient]) -> None:
    d, client = served
    response = client.put(f"/v1/operations/{d.ids['refund']}/approve", content=b"{}")
    assert response.status_code == 405


def test_a_body_that_stops_arriving_is_408() -> None:
    """The guard alone over a stub app: a body whose rest never comes is cut off at the deadline."""
    reached: list[bytes] = []

    async def stub(scope: Any, receive: Any, send: Any) -> None:
        reached.append((await receive())["body"])

    class State:
        tokens: dict[str, Any] = {}
        body_timeout_seconds = 0.2

    class Router:
        routes: list[Any] = []

    class App:
        state = State()
        router = Router()

    messages = [{"type": "http.request", "body": b"{", "more_body": True}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.sleep(3600)  # the client sends nothing more
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/health", "app": App(),
             "headers": [(b"transfer-encoding", b"chunked")]}
    asyncio.run(asyncio.wait_for(RequestGuard(stub)(scope, receive, send), 5))
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]
    assert not reached


@pytest.mark.parametrize("body", [b'{"reason": "a", "reason": "b"}', b'{"reason": NaN}', b'\xff\xfe{}',
                                  b"[" * 5000 + b"]" * 5000, b'{"reason": ' + b"9" * 5000 + b"}"])
def test_action_bodies_are_strict_json_like_commands(served: tuple[Desk, TestClient], body: bytes) -> None:
    d, client = served
    before = timeline_length(d, client, "refund")
    response = client.post(f"/v1/operations/{d.ids['refund']}/cancel", content=body,
                           headers={**auth("operator"), "Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["code"] == "invalid_json", response.text
    assert timeline_length(d, client, "refund") == before


def test_the_largest_valid_action_body_fits_the_limit(served: tuple[Desk, TestClient]) -> None:
    from ledger.intents import MAX_EVIDENCE_CHARS

    d, client = served
    evidence = "\u00e9" * MAX_EVIDENCE_CHARS  # written as six-byte escapes by json.dumps
    body = json.dumps({"resolution": "acknowledge", "evidence": evidence}).encode()
    assert len(body) <= ACTION_MAX_BODY_BYTES
    response = client.post(f"/v1/operations/{d.ids['refund']}/resolve", content=body,
                           headers={**auth("operator"), "Content-Type": "application/json"})
    assert response.status_code != 413 and response.status_code != 422, response.text


def test_a_head_over_the_limit_is_431_however_it_arrives(served: tuple[Desk, TestClient]) -> None:
    _, client = served
    big = client.get("/health", headers={"X-Big": "a" * (17 * 1024)})
    assert big.status_code == 431 and big.json()["code"] == "headers_too_large"
    many = client.get("/health", headers={f"X-H{n}": "v" for n in range(2000)})
    assert many.status_code == 431
    assert client.get("/health", headers={"X-Small": "a" * 1024}).status_code == 200
