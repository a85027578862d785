"""Stored v1 receipts (their ``ReceiptCompleted`` kept only the broad outcome) decode through the
upcaster and replay the documented generic envelope: an applied one its 200, a not_applied one a
422 problem+json like every other error (issue 15 items 3 and 6; guide, 'Inbound commands')."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
from eventsourcing.persistence import StoredEvent

from ledger.receipts import APPLIED, COMPLETED, NOT_APPLIED, V1_GENERIC_BODY, receipt_id
from tests.desk import auth
from tests.receipt_desk import ReceiptDesk, receipt_desk

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "receipt_v1.json"


def stored_v1(desk: ReceiptDesk) -> list[dict[str, Any]]:
    """Insert the fixture's records as they were stored; returns them."""
    records: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["records"]
    desk.store.app.recorder.insert_events([
        StoredEvent(originator_id=UUID(r["originator_id"]), originator_version=r["originator_version"],
                    topic=r["topic"], state=json.dumps(r["state"]).encode()) for r in records])
    return records


def _make_ticket_again(desk: ReceiptDesk, label: str, key: str) -> httpx.Response:
    """``POST /v1/commands/make_ticket`` as the viewer with ``label`` under idempotency key ``key``
    (the key the v1 record was stored under, so the answer is a replay)."""
    return desk.client.post("/v1/commands/make_ticket", content=json.dumps({"label": label}).encode(),
                            headers={**auth("viewer"), "Content-Type": "application/json",
                                     "Idempotency-Key": json.dumps(key)})


def test_a_v1_receipt_decodes_and_replays_its_generic_envelope(database_url: str) -> None:
    with receipt_desk(database_url) as desk:
        records = stored_v1(desk)
        rid = receipt_id("vera", "make_ticket", "legacy-key-1")
        assert str(rid) == records[0]["originator_id"]
        receipt = desk.runner.load(rid)
        assert receipt is not None and receipt.state == COMPLETED and receipt.envelope is not None
        assert (receipt.envelope.status, receipt.envelope.outcome) == (200, APPLIED)
        response = _make_ticket_again(desk, "legacy", "legacy-key-1")
        assert response.status_code == 200
        assert response.headers["idempotent-replayed"] == "true"
        assert response.headers["content-type"] == "application/json"
        assert response.content == V1_GENERIC_BODY % b"applied"
        assert response.json() == {"outcome": "applied",
                                   "detail": "recorded by opledger receipts v1, which kept only the outcome"}
        assert response.headers["opledger-transaction-id"] == str(rid)
        assert desk.tickets() == 0  # replayed, not run


def test_a_v1_not_applied_receipt_replays_a_problem_json_422(database_url: str) -> None:
    with receipt_desk(database_url) as desk:
        records = stored_v1(desk)
        rid = receipt_id("vera", "make_ticket", "legacy-key-2")
        assert str(rid) in {r["originator_id"] for r in records}
        receipt = desk.runner.load(rid)
        assert receipt is not None and receipt.envelope is not None
        assert (receipt.envelope.status, receipt.envelope.outcome) == (422, NOT_APPLIED)
        response = _make_ticket_again(desk, "legacy-refused", "legacy-key-2")
        assert response.status_code == 422
        assert response.headers["idempotent-replayed"] == "true"
        # An error, so problem+json (RFC 9457) with code and retryable, as every other error is.
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json() == {"type": "about:blank", "title": "Invalid input", "status": 422,
                                   "detail": "the command was not applied (v1 receipt: no detail kept)",
                                   "code": "not_applied", "retryable": False, "outcome": "not_applied"}
        assert (receipt.envelope.error_code, receipt.envelope.error_message) == (
            response.json()["code"], response.json()["detail"])
        assert desk.tickets() == 0  # replayed, not run
