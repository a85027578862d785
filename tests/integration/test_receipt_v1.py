"""A stored v1 receipt (its ``ReceiptCompleted`` kept only the broad outcome) decodes through the
upcaster and replays the documented generic envelope (issue 15 item 6; guide, 'Inbound
commands')."""

from __future__ import annotations

import json
from pathlib import Path
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from ledger.receipts import APPLIED, COMPLETED, V1_GENERIC_BODY, receipt_id
from tests.desk import auth
from tests.receipt_desk import receipt_desk

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "receipt_v1.json"


def test_a_v1_receipt_decodes_and_replays_its_generic_envelope(database_url: str) -> None:
    records = json.loads(FIXTURE.read_text())["records"]
    with receipt_desk(database_url) as desk:
        desk.store.app.recorder.insert_events([
            StoredEvent(originator_id=UUID(r["originator_id"]), originator_version=r["originator_version"],
                        topic=r["topic"], state=json.dumps(r["state"]).encode()) for r in records])
        rid = receipt_id("vera", "make_ticket", "legacy-key-1")
        assert str(rid) == records[0]["originator_id"]
        receipt = desk.runner.load(rid)
        assert receipt is not None and receipt.state == COMPLETED and receipt.envelope is not None
        assert (receipt.envelope.status, receipt.envelope.outcome) == (200, APPLIED)
        response = desk.client.post("/v1/commands/make_ticket", content=b'{"label": "legacy"}',
                                    headers={**auth("viewer"), "Idempotency-Key": '"legacy-key-1"'})
        assert response.status_code == 200
        assert response.headers["idempotent-replayed"] == "true"
        assert response.headers["content-type"] == "application/json"
        assert response.content == V1_GENERIC_BODY % b"applied"
        assert response.json() == {"outcome": "applied",
                                   "detail": "recorded by opledger receipts v1, which kept only the outcome"}
        assert response.headers["opledger-transaction-id"] == str(rid)
        assert desk.tickets() == 0  # replayed, not run
