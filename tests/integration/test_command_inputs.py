"""Hostile or odd command input on both backends: every refusal is a terminal problem+json
answer (never a 500, never a retry-forever 503), and a refused body is never stored whole.

Source: the fresh-clone tryout of issue 15 (R1-R4, R9-R10, R13-R14, R18).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from ledger.inbound import MAX_BODY_DEPTH
from ledger.receipts import COMPLETED, NOT_APPLIED, receipt_id
from tests.desk import auth
from tests.receipt_desk import ReceiptDesk, receipt_desk

URL = "/v1/commands/make_ticket"


@pytest.fixture
def desk(database_url: str) -> Iterator[ReceiptDesk]:
    with receipt_desk(database_url) as d:
        yield d


def send(desk: ReceiptDesk, content: bytes, key: str | None, **headers: str) -> Any:
    sent = {**auth("viewer"), "Content-Type": "application/json", **headers}
    if key is not None:
        sent["Idempotency-Key"] = f'"{key}"'
    return desk.client.post(URL, content=content, headers=sent)


def stored_bytes(desk: ReceiptDesk) -> int:
    """The size of every stored event's state, bytes (what a refused body must not inflate)."""
    recorder = desk.store.app.recorder
    return sum(len(n.state) for n in recorder.select_notifications(start=None, limit=10_000))


def assert_terminal(desk: ReceiptDesk, response: Any, status: int, code: str, key: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code and response.json()["retryable"] is False
    receipt = desk.runner.load(receipt_id("vera", "make_ticket", key))
    assert receipt is not None and receipt.state == COMPLETED and receipt.envelope is not None
    assert receipt.envelope.outcome == NOT_APPLIED
    again = send(desk, response.request.content, key)
    assert (again.status_code, again.content) == (response.status_code, response.content)
    assert again.headers["idempotent-replayed"] == "true"
    assert desk.tickets() == 0


@pytest.mark.parametrize("depth", [100_000, MAX_BODY_DEPTH + 1])
def test_deeply_nested_json_is_400_invalid_json_not_500(desk: ReceiptDesk, depth: int) -> None:
    body = b"[" * depth + b"]" * depth
    assert_terminal(desk, send(desk, body, f"deep-{depth}"), 400, "invalid_json", f"deep-{depth}")
    unkeyed = send(desk, body, None)
    assert unkeyed.status_code == 400 and unkeyed.json()["code"] == "invalid_json"


def test_nesting_up_to_the_limit_reaches_the_model(desk: ReceiptDesk) -> None:
    inner: Any = 1
    for _ in range(MAX_BODY_DEPTH - 2):
        inner = [inner]
    response = send(desk, json.dumps({"label": "a", "extra": inner}).encode(), "deep-ok")
    assert response.status_code == 201, response.text


def test_a_body_over_the_limit_is_413_and_nothing_is_stored(desk: ReceiptDesk) -> None:
    desk.app.state.command_max_body_bytes = 4096
    before = stored_bytes(desk)
    big = json.dumps({"label": "a", "pad": "x" * 5000}).encode()
    response = send(desk, big, "big")
    assert response.status_code == 413, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "body_too_large" and "4,096 bytes" in response.json()["detail"]
    assert desk.runner.load(receipt_id("vera", "make_ticket", "big")) is None
    assert stored_bytes(desk) == before and desk.tickets() == 0
    assert send(desk, big, None).status_code == 413  # the keyless path too


def test_a_body_larger_than_its_content_length_says_is_413(desk: ReceiptDesk) -> None:
    desk.app.state.command_max_body_bytes = 4096

    def chunks() -> Iterator[bytes]:  # no Content-Length at all: chunked
        yield b'{"label": "a", "pad": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    headers = {**auth("viewer"), "Idempotency-Key": '"chunked"'}
    response = desk.client.post(URL, content=chunks(), headers=headers)
    assert response.status_code == 413
    assert desk.runner.load(receipt_id("vera", "make_ticket", "chunked")) is None


def test_the_default_body_limit_is_one_mebibyte(desk: ReceiptDesk) -> None:
    from adapters.http.commands import DEFAULT_MAX_BODY_BYTES, ReceiptSettings

    assert DEFAULT_MAX_BODY_BYTES == ReceiptSettings().max_body_bytes == 1024 * 1024
    response = send(desk, json.dumps({"label": "a", "pad": "x" * (1024 * 1024)}).encode(), "mib")
    assert response.status_code == 413


@pytest.mark.parametrize("body", ['{"label": "a", "x\\u0000": 1}', '{"label": "a\\u0000b"}',
                                  '{"label": "a\\ud800"}'])
def test_text_the_store_cannot_hold_is_a_terminal_422(desk: ReceiptDesk, body: str) -> None:
    response = send(desk, body.encode(), "nul")
    assert_terminal(desk, response, 422, "unstorable_text", "nul")
    assert "cannot hold" in response.json()["detail"]


def test_a_failed_publication_logs_its_error(desk: ReceiptDesk, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*aggregates: Any) -> None:
        raise ValueError("the codec refused something")

    monkeypatch.setattr(desk.store.app, "save", broken)
    with capture_logs() as logs:
        response = send(desk, b'{"label": "a"}', "logged")
    assert response.status_code == 503
    failed = [e for e in logs if e["event"] == "recording the receipt failed; reading it back"]
    assert failed and "the codec refused something" in failed[0]["error"]


@pytest.mark.parametrize("target", ["ftp://x/p", "http://u:pw@x/p"])
def test_an_intent_the_ledger_refuses_is_a_terminal_not_applied_422(desk: ReceiptDesk, target: str) -> None:
    body = json.dumps({"label": "a", "target": target}).encode()
    response = send(desk, body, "payload")
    assert_terminal(desk, response, 422, "invalid_payload", "payload")
    assert "target" in response.json()["detail"]
    assert len(desk.runner.owned) == 0
    # Recovery finds nothing to adopt: the receipt is terminal, not pending.
    assert desk.runner.recover(receipt_id("vera", "make_ticket", "payload"), max_adoptions=3) is None


def test_an_empty_body_is_400_invalid_json(desk: ReceiptDesk) -> None:
    assert_terminal(desk, send(desk, b"", "empty"), 400, "invalid_json", "empty")
    assert "empty" in send(desk, b"  ", None).json()["detail"]


@pytest.mark.parametrize("content, why", [
    ('{"label": "\u00e9"}'.encode("utf-16"), "not UTF-8"),
    ('{"label": "\u00e9"}'.encode("utf-32"), "not UTF-8"),
    ('{"label": "\u00e9"}'.encode("utf-8-sig"), "byte order mark"),
    (b'{"label": "a", "label": "b"}', "repeats the member name"),
    (b'{"label": "a", "n": NaN}', "NaN"),
])
def test_bodies_rfc_8259_refuses_are_400_invalid_json(desk: ReceiptDesk, content: bytes, why: str) -> None:
    response = send(desk, content, None)
    assert response.status_code == 400 and response.json()["code"] == "invalid_json"
    assert why in response.json()["detail"]
    assert desk.tickets() == 0


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "application/json; charset=utf-16"])
def test_a_content_type_other_than_json_is_415(desk: ReceiptDesk, content_type: str) -> None:
    response = send(desk, b'{"label": "a"}', "ct", **{"Content-Type": content_type})
    assert response.status_code == 415 and response.json()["code"] == "unsupported_media_type"
    assert desk.runner.load(receipt_id("vera", "make_ticket", "ct")) is None


def test_a_body_without_content_type_is_415(desk: ReceiptDesk) -> None:
    response = desk.client.post(URL, content=b'{"label": "a"}', headers={**auth("viewer"), "Idempotency-Key": '"none"'})
    assert "content-type" not in response.request.headers
    assert response.status_code == 415 and response.json()["code"] == "unsupported_media_type"
    assert desk.runner.load(receipt_id("vera", "make_ticket", "none")) is None and desk.tickets() == 0


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=UTF-8",
                                          "application/merge-patch+json"])
def test_json_content_types_are_accepted(desk: ReceiptDesk, content_type: str) -> None:
    assert send(desk, b'{"label": "a"}', None, **{"Content-Type": content_type}).status_code == 201


@pytest.mark.parametrize("raw, says", [
    ('"k3";a=1', "takes no parameters"), ('"k1", "k2"', "not a list"), ("k", "quoted string"),
    ('"abc', "no closing quote"),
])
def test_key_errors_say_what_is_wrong(desk: ReceiptDesk, raw: str, says: str) -> None:
    headers = {**auth("viewer"), "Idempotency-Key": raw}
    response = desk.client.post(URL, content=b'{"label": "a"}', headers=headers)
    assert response.status_code == 400 and response.json()["code"] == "idempotency_key_malformed"
    assert says in response.json()["detail"]


@pytest.mark.parametrize("method, url, headers, status", [
    ("POST", URL, {}, 401),
    ("POST", URL, {"Authorization": "Basic dTpw"}, 401),
    ("GET", URL, "viewer", 405),
    ("POST", URL + "?x=1", "viewer", 422),
    ("POST", "/v1/commands/Bad!Name", "viewer", 422),
    ("POST", "/v1/commands/place_order%2F..", "viewer", 404),
])
def test_every_error_carries_code_and_retryable(desk: ReceiptDesk, method: str, url: str, headers: Any,
                                                status: int) -> None:
    sent = auth("viewer") if headers == "viewer" else headers
    response = desk.client.request(method, url, content=b'{"label": "a"}', headers=sent)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert isinstance(body["code"], str) and body["code"] and body["retryable"] is False
