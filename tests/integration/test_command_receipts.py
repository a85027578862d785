"""Keyed commands on both backends: replay, reuse (422), in flight (409), keys (400), refusals,
thrown errors, the keyless fast path, commits of unknown fate (read back, never guessed).

Source: issue 15 items 1-4 and its acceptance ("reuse tests", "ambiguity test").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import OperationalError

from ledger import failpoints
from ledger.receipts import COMPLETED, NOT_APPLIED, PENDING, Receipt, receipt_id
from tests.apps import RUNS_FILE_ENV
from tests.desk import auth
from tests.receipt_desk import ReceiptDesk, receipt_desk

URL = "/v1/commands/make_ticket"


@pytest.fixture
def desk(database_url: str) -> Iterator[ReceiptDesk]:
    with receipt_desk(database_url) as d:
        yield d


def post(desk: ReceiptDesk, body: Any, key: str | None = None, *, url: str = URL, raw: str | None = None) -> Any:
    headers = {**auth("viewer"), "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = raw if raw is not None else f'"{key}"'
    return desk.client.post(url, content=json.dumps(body).encode(), headers=headers)


def kept(response: Any) -> dict[str, str]:
    """The headers an envelope keeps (what a replay must repeat exactly)."""
    return {k: v for k, v in response.headers.items()
            if k in ("content-type", "location", "etag", "x-ticket-label", "content-length",
                     "opledger-transaction-id")}


def stored(desk: ReceiptDesk, key: str, command: str = "make_ticket") -> Receipt:
    found = desk.runner.load(receipt_id("vera", command, key))
    assert found is not None
    return found


def test_a_keyed_command_replays_status_headers_and_body_exactly(desk: ReceiptDesk) -> None:
    first = post(desk, {"label": "a"}, "k-1")
    assert first.status_code == 201, first.text
    assert first.headers["location"].startswith("/tickets/") and first.headers["etag"] == '"1"'
    assert "idempotent-replayed" not in first.headers
    again = post(desk, {"label": "a"}, "k-1")
    assert again.status_code == 201
    assert again.content == first.content
    assert kept(again) == kept(first)
    assert again.headers["idempotent-replayed"] == "true"
    assert desk.tickets() == 1
    receipt = stored(desk, "k-1")
    assert receipt.state == COMPLETED and receipt.version == 2  # Opened, then Completed with the effects
    body = first.json()
    assert receipt.operation_ids == [UUID(body["operation_id"])]
    assert first.headers["opledger-transaction-id"] == str(receipt.id)


def test_the_receipt_completes_in_the_same_commit_as_the_entity_and_operation(desk: ReceiptDesk) -> None:
    first = post(desk, {"label": "co"}, "k-co")
    receipt = stored(desk, "k-co")
    recorder = desk.store.app.recorder
    completed = recorder.select_events(receipt.id, gt=1)[0]
    ticket_event = recorder.select_events(UUID(first.json()["ticket_id"]))[0]
    op_event = recorder.select_events(receipt.operation_ids[0])[0]
    # One save() call: one insert statement block, consecutive notification ids, nothing between.
    ids = sorted(n.id for n in recorder.select_notifications(start=None, limit=100)
                 if n.originator_id in (receipt.id, ticket_event.originator_id, op_event.originator_id)
                 and not (n.originator_id == receipt.id and n.originator_version == 1))
    assert ids == list(range(ids[0], ids[0] + 3)), ids
    assert completed.topic.endswith("Receipt.ReceiptCompleted")


def test_the_same_key_with_another_body_is_422_and_changes_nothing(desk: ReceiptDesk) -> None:
    assert post(desk, {"label": "a"}, "k-2").status_code == 201
    other = post(desk, {"label": "b"}, "k-2")
    assert other.status_code == 422
    assert other.headers["content-type"] == "application/problem+json"
    assert other.json()["code"] == "idempotency_key_reused" and other.json()["retryable"] is False
    assert desk.tickets() == 1
    assert stored(desk, "k-2").version == 2


def test_the_same_key_on_another_route_is_a_distinct_receipt(desk: ReceiptDesk) -> None:
    made = post(desk, {"label": "a"}, "k-3")
    renamed = post(desk, {"ticket_id": made.json()["ticket_id"], "label": "b"}, "k-3", url="/v1/commands/rename_ticket")
    assert renamed.status_code == 200, renamed.text
    assert "idempotent-replayed" not in renamed.headers
    assert stored(desk, "k-3").id != stored(desk, "k-3", "rename_ticket").id


def test_the_same_key_of_another_principal_is_a_distinct_receipt(desk: ReceiptDesk) -> None:
    mine = post(desk, {"label": "a"}, "k-4")
    headers = {**auth("operator"), "Content-Type": "application/json", "Idempotency-Key": '"k-4"'}
    theirs = desk.client.post(URL, content=json.dumps({"label": "a"}).encode(), headers=headers)
    assert theirs.status_code == 201 and "idempotent-replayed" not in theirs.headers
    assert theirs.json()["ticket_id"] != mine.json()["ticket_id"]


@pytest.mark.parametrize("raw, why", [
    ("k-5", "not quoted"), ('""', "empty"), ('"a\\b"', "bad escape"), ('"a\x7fb"', "not printable"),
    ('"' + "x" * 256 + '"', "too long"), ('"a"b"', "inner quote"),
])
def test_a_malformed_key_is_400(desk: ReceiptDesk, raw: str, why: str) -> None:
    response = post(desk, {"label": "a"}, "x", raw=raw)
    assert response.status_code == 400, why
    assert response.json()["code"] == "idempotency_key_malformed"
    assert desk.tickets() == 0


def test_two_key_headers_are_400(desk: ReceiptDesk) -> None:
    headers = [("Authorization", "Bearer viewer-token"), ("Idempotency-Key", '"a"'), ("Idempotency-Key", '"b"')]
    response = desk.client.post(URL, content=b'{"label": "a"}', headers=headers)
    assert response.status_code == 400


def test_an_escaped_key_is_its_unescaped_content(desk: ReceiptDesk) -> None:
    assert post(desk, {"label": "a"}, "x", raw='"q\\"k\\\\"').status_code == 201
    assert desk.runner.load(receipt_id("vera", "make_ticket", 'q"k\\')) is not None


def test_a_missing_key_where_required_is_400(desk: ReceiptDesk) -> None:
    response = post(desk, {"ticket_id": "00000000-0000-0000-0000-000000000000", "label": "b"},
                    url="/v1/commands/rename_ticket")
    assert response.status_code == 400
    assert response.json()["code"] == "idempotency_key_missing"


def test_without_a_key_the_fast_path_answers_the_same_shape_each_time(desk: ReceiptDesk) -> None:
    one, two = post(desk, {"label": "a"}), post(desk, {"label": "a"})
    assert one.status_code == two.status_code == 201
    assert one.json().keys() == two.json().keys() and one.json() != two.json()
    assert "opledger-transaction-id" not in one.headers
    assert desk.tickets() == 2


def test_a_request_in_flight_is_409_pending_with_retry_after(desk: ReceiptDesk) -> None:
    spec = desk.runner.spec("make_ticket")
    from ledger.inbound import canonical_request

    request = canonical_request(spec.name, "vera", json.dumps({"label": "a"}).encode())
    receipt = Receipt.open(principal="vera", scope=spec.name, key="k-6", request=request, owner="other:1",
                           now=desk.clock.now(), lease_seconds=5)
    desk.store.app.save(receipt)
    response = post(desk, {"label": "a"}, "k-6")
    assert response.status_code == 409
    assert response.json()["code"] == "idempotency_receipt_pending" and response.json()["retryable"] is True
    assert response.headers["retry-after"] == "1"  # a small wait, not the 5 s lease (tryout R12)
    desk.clock.advance(6)  # type: ignore[attr-defined]
    adopted = post(desk, {"label": "a"}, "k-6")  # the owner's lease ran out: this request takes over
    assert adopted.status_code == 201
    assert stored(desk, "k-6").epoch == 2 and desk.tickets() == 1


def test_a_typed_refusal_is_terminal_not_applied_and_replays_its_code_message_retryability(desk: ReceiptDesk) -> None:
    first = post(desk, {"label": "taken"}, "k-7")
    assert first.status_code == 409
    assert first.json()["code"] == "label_taken" and first.json()["retryable"] is False
    again = post(desk, {"label": "taken"}, "k-7")
    assert (again.status_code, again.content) == (first.status_code, first.content)
    assert again.headers["idempotent-replayed"] == "true"
    receipt = stored(desk, "k-7")
    assert receipt.state == COMPLETED and receipt.envelope is not None
    assert (receipt.envelope.outcome, receipt.envelope.error_code) == (NOT_APPLIED, "label_taken")
    assert desk.tickets() == 0


def test_an_invalid_request_and_an_unknown_entity_are_terminal_refusals(desk: ReceiptDesk) -> None:
    invalid = post(desk, {"label": ""}, "k-8")
    assert invalid.status_code == 422 and invalid.json()["code"] == "invalid_request"
    assert stored(desk, "k-8").state == COMPLETED
    missing = post(desk, {"ticket_id": "00000000-0000-0000-0000-000000000001", "label": "b"}, "k-9",
                   url="/v1/commands/rename_ticket")
    assert missing.status_code == 404 and missing.json()["code"] == "unknown_entity"
    headers = {**auth("viewer"), "Content-Type": "application/json", "Idempotency-Key": '"k-10"'}
    not_json = desk.client.post(URL, content=b"{nope", headers=headers)
    assert not_json.status_code == 400 and not_json.json()["code"] == "invalid_json"
    assert desk.client.post(URL, content=b"{nope", headers=headers).headers["idempotent-replayed"] == "true"


def test_a_thrown_error_leaves_the_receipt_pending_and_retryable(desk: ReceiptDesk) -> None:
    response = post(desk, {"label": "boom"}, "k-11")
    assert response.status_code == 503
    assert response.json()["code"] == "command_incomplete" and response.json()["retryable"] is True
    assert "retry-after" in response.headers
    receipt = stored(desk, "k-11")
    assert receipt.state == PENDING and receipt.released
    assert post(desk, {"label": "boom"}, "k-11").status_code == 503  # the retry runs it again
    assert stored(desk, "k-11").epoch == 2
    assert len(desk.runner.owned) == 0


def test_an_unknown_command_is_404_and_needs_a_token(desk: ReceiptDesk) -> None:
    assert post(desk, {}, "k", url="/v1/commands/nope").json()["code"] == "unknown_command"
    assert desk.client.post(URL, json={"label": "a"}).status_code == 401


# ------------------------------------------------------------------ commits of unknown fate


@pytest.fixture
def handler_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """How many times a handler ran (``tests.apps`` appends a line per run)."""
    path = tmp_path / "runs.txt"
    monkeypatch.setenv(RUNS_FILE_ENV, str(path))
    return lambda: len(path.read_text().splitlines()) if path.exists() else 0


def test_a_completion_that_landed_but_raised_is_read_back_not_rerun(
        desk: ReceiptDesk, handler_runs: Callable[[], int]) -> None:
    with failpoints.raise_at("receipt_complete:after", OperationalError("connection lost during COMMIT")):
        response = post(desk, {"label": "a"}, "k-20")
    assert response.status_code == 201, response.text
    assert desk.tickets() == 1 and handler_runs() == 1  # settled by reading back, not by running again
    assert post(desk, {"label": "a"}, "k-20").content == response.content
    assert handler_runs() == 1


def test_a_completion_that_did_not_land_stays_pending_and_a_retry_converges(
        desk: ReceiptDesk, handler_runs: Callable[[], int]) -> None:
    with failpoints.raise_at("receipt_complete:before", OperationalError("connection lost before COMMIT")):
        response = post(desk, {"label": "a"}, "k-21")
    assert response.status_code == 503 and response.json()["code"] == "command_incomplete"
    assert desk.tickets() == 0 and stored(desk, "k-21").state == PENDING
    assert handler_runs() == 1  # the server did not run it again on its own guess
    retried = post(desk, {"label": "a"}, "k-21")
    assert retried.status_code == 201 and desk.tickets() == 1
    assert post(desk, {"label": "a"}, "k-21").content == retried.content


@pytest.mark.parametrize("boundary, landed", [("receipt_open:after", True), ("receipt_open:before", False)])
def test_an_ambiguous_publication_of_the_receipt_converges(desk: ReceiptDesk, boundary: str, landed: bool) -> None:
    with failpoints.raise_at(boundary, OperationalError("connection lost")):
        response = post(desk, {"label": "a"}, "k-22")
    if landed:
        assert response.status_code == 201
    else:
        assert response.status_code == 503 and response.json()["retryable"] is True
        assert desk.runner.load(receipt_id("vera", "make_ticket", "k-22")) is None
        response = post(desk, {"label": "a"}, "k-22")
        assert response.status_code == 201
    assert post(desk, {"label": "a"}, "k-22").content == response.content
    assert desk.tickets() == 1


def test_a_read_only_server_refuses_commands_without_running_them(desk: ReceiptDesk) -> None:
    desk.app.state.writable = False  # `opledger serve` without --write beside a SQLite worker
    response = post(desk, {"label": "a"}, "k-ro")
    assert response.status_code == 409 and response.json()["code"] == "store_read_only"
    assert desk.tickets() == 0 and desk.runner.load(receipt_id("vera", "make_ticket", "k-ro")) is None


def test_a_read_only_server_replays_completed_receipts(desk: ReceiptDesk) -> None:
    first = post(desk, {"label": "a"}, "k-done")
    assert first.status_code == 201
    desk.app.state.writable = False  # then a read-only `serve` answers the client's retry
    length = desk.app.state.store.app.recorder.max_notification_id()
    again = post(desk, {"label": "a"}, "k-done")
    assert again.status_code == 201 and again.content == first.content
    assert again.headers["idempotent-replayed"] == "true" and kept(again) == kept(first)
    other = post(desk, {"label": "b"}, "k-done")  # the same key for another request: still refused
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    assert post(desk, {"label": "c"}, "k-new").json()["code"] == "store_read_only"
    assert desk.app.state.store.app.recorder.max_notification_id() == length and desk.tickets() == 1
