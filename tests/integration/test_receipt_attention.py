"""A receipt recovery gave up on is operator work (issue 31 item 4), on both backends: it is on
the attention queue (CLI, observe API) as ``receipt_stuck`` with its actions and on ``/metrics``
as ``opledger_receipts_stuck``; an operator retries or abandons it through the same paths as an
operation's resolution; the client's retry takes it off the queue too."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from structlog.testing import capture_logs
from typer.testing import CliRunner

from adapters.cli.app import app as cli
from executors.receipt_recovery import ReceiptRecoveryConfig, ReceiptRecoveryService
from ledger.receipts import COMPLETED, PENDING, Receipt, receipt_id
from projections.metrics import MetricsProjection
from projections.metrics_store import MetricsStore
from tests.desk import auth
from tests.receipt_desk import APP_TOPIC, ReceiptDesk, receipt_desk

MAX_ADOPTIONS = 2
KEY = "k-stuck"
RID = receipt_id("vera", "make_ticket", KEY)
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def desk(database_url: str) -> Iterator[ReceiptDesk]:
    with receipt_desk(database_url) as d:
        yield d


def _stuck(desk: ReceiptDesk) -> ReceiptRecoveryService:
    """A keyed command whose handler throws every time, recovered until recovery gives up."""
    response = desk.client.post("/v1/commands/make_ticket", content=b'{"label": "boom"}',
                                headers={**auth("viewer"), **JSON, "Idempotency-Key": f'"{KEY}"'})
    assert response.status_code == 503  # thrown: the receipt stays pending, released
    recovery = ReceiptRecoveryService(runner=desk.runner, config=ReceiptRecoveryConfig(max_adoptions=MAX_ADOPTIONS))
    stopped = 0
    for _ in range(MAX_ADOPTIONS + 2):
        desk.clock.advance(6)  # type: ignore[attr-defined]
        stopped += recovery.run_once(desk.clock.now()).stopped
    assert stopped == 1  # recorded once, however many passes look at it afterwards
    return recovery


def _metrics(desk: ReceiptDesk) -> str:
    MetricsProjection(app=desk.store.app, store=MetricsStore(desk.store.view)).catch_up()
    response = desk.client.get("/metrics")
    assert response.status_code == 200
    return response.text


def _gauge(text: str) -> float | None:
    found = re.search(r'^opledger_receipts_stuck\{command="make_ticket"\} (\S+)$', text, flags=re.MULTILINE)
    return float(found.group(1)) if found else None


def _load(desk: ReceiptDesk) -> Receipt:
    receipt = desk.runner.load(RID)
    assert receipt is not None
    return receipt


def _attention(desk: ReceiptDesk, query: str = "", role: str = "operator") -> list[dict[str, Any]]:
    response = desk.client.get(f"/v1/attention{query}", headers=auth(role))
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()
    return rows


def test_recovery_puts_a_receipt_it_gave_up_on_on_the_attention_queue_and_on_metrics(desk: ReceiptDesk) -> None:
    with capture_logs() as logs:
        _stuck(desk)
    receipt = _load(desk)
    assert receipt.state == PENDING and receipt.adoptions == MAX_ADOPTIONS and receipt.recovery_stopped_at is not None
    assert [e for e in logs if e["event"] == "receipt recovery gave up; the receipt is on the attention queue"] == [
        {"event": "receipt recovery gave up; the receipt is on the attention queue", "log_level": "warning",
         "receipt_id": str(RID), "command": "make_ticket", "adoptions": MAX_ADOPTIONS, "reason": "RuntimeError"}]
    assert _gauge(_metrics(desk)) == 1.0

    [row] = _attention(desk)
    assert row["kind"] == "receipt" and row["receipt_id"] == row["id"] == str(RID) and row["attention"] == "receipt_stuck"
    assert row["attention_detail"] == {"command": "make_ticket", "adoptions": MAX_ADOPTIONS, "reason": "RuntimeError",
                                       "epoch": receipt.epoch}
    assert (row["command"], row["principal"], row["status"], row["actions"]) == (
        "make_ticket", "vera", "pending", ["retry", "abandon"])
    assert _attention(desk, "?reason=receipt_stuck") == [row]
    # The actions are the token's: a viewer may not resolve (a new user's finding: it was offered).
    assert _attention(desk, role="viewer") == [{**row, "actions": []}]
    assert _attention(desk, "?reason=ambiguous") == []


def test_the_cli_lists_it_and_an_operator_retries_it(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with receipt_desk(database_url) as desk:
        _stuck(desk)
        MetricsProjection(app=desk.store.app, store=MetricsStore(desk.store.view)).catch_up()
    monkeypatch.setenv("OPLEDGER_APP", APP_TOPIC)
    monkeypatch.setenv("OPLEDGER_DATABASE_URL", database_url)
    runner = CliRunner()
    listed = runner.invoke(cli, ["attention", "--json"])
    assert listed.exit_code == 0, listed.output
    [row] = json.loads(listed.stdout)
    assert (row["kind"], row["receipt_id"], row["attention"]) == ("receipt", str(RID), "receipt_stuck")
    table = runner.invoke(cli, ["attention"], env={"COLUMNS": "300"})
    assert "keyed commands needing attention (1)" in table.stdout and "receipt_stuck" in table.stdout
    assert "opledger resolve RECEIPT_ID --resolution retry|abandon" in table.stdout

    missing = runner.invoke(cli, ["resolve", str(RID), "--resolution", "retry", "--evidence", " "])
    assert missing.exit_code == 2 and "evidence is required" in missing.stderr
    done = runner.invoke(cli, ["resolve", str(RID), "--resolution", "retry", "--evidence", "fixed the handler's bug",
                               "--json"])
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert (result["receipt_id"], result["resolution"], result["status"]) == (str(RID), "retry", "pending")
    assert [e["event"] for e in result["recorded"]] == ["ReceiptResolved"]
    again = runner.invoke(cli, ["resolve", str(RID), "--resolution", "retry", "--evidence", "once more"])
    assert again.exit_code == 1 and "recovery has not given up on it" in again.stderr
    assert json.loads(runner.invoke(cli, ["attention", "--json"]).stdout) == []
    # A receipt's id given where an operation's goes is named for what it is.
    shown = runner.invoke(cli, ["ops", "show", str(RID)])
    assert shown.exit_code == 2 and f"{RID} is not an operation: it is a keyed command's receipt" in shown.stderr

    # Recovery runs it again at once, with a fresh budget of adoptions (the handler still throws
    # here, so it ends on the queue again).
    with receipt_desk(database_url, migrate=False) as desk:
        receipt = _load(desk)
        assert (receipt.adoptions, receipt.released, receipt.recovery_stopped_at) == (0, True, None)
        recovery = ReceiptRecoveryService(runner=desk.runner,
                                          config=ReceiptRecoveryConfig(max_adoptions=MAX_ADOPTIONS))
        assert recovery.run_once(desk.clock.now()).failed == 1  # adopted at once: released by the resolution
        stopped = 0
        for _ in range(MAX_ADOPTIONS + 1):
            desk.clock.advance(6)  # type: ignore[attr-defined]
            stopped += recovery.run_once(desk.clock.now()).stopped
        assert stopped == 1 and _load(desk).adoptions == MAX_ADOPTIONS
        assert _gauge(_metrics(desk)) == 1.0


def test_an_operator_abandons_it_and_the_clients_retry_gets_that_answer(desk: ReceiptDesk) -> None:
    _stuck(desk)
    path = f"/v1/receipts/{RID}/resolve"
    body = {"resolution": "abandon", "evidence": "the customer placed the order again by phone"}
    assert desk.client.post(path, json=body, headers=auth("viewer")).status_code == 403
    assert desk.client.post(path, json={**body, "resolution": "succeeded"},
                            headers=auth("operator")).status_code == 422
    unknown = desk.client.post(f"/v1/receipts/{UUID(int=7)}/resolve", json=body, headers=auth("operator"))
    assert unknown.status_code == 404 and unknown.json()["code"] == "receipt_not_found"

    done = desk.client.post(path, json=body, headers=auth("operator"))
    assert done.status_code == 200, done.text
    result = done.json()
    assert (result["status"], [e["event"] for e in result["recorded"]]) == (
        COMPLETED, ["ReceiptResolved", "ReceiptCompleted"])
    receipt = _load(desk)
    resolved = [e for e in desk.store.app.events.get(RID) if isinstance(e, Receipt.ReceiptResolved)]
    assert [(e.principal, e.resolution, e.evidence) for e in resolved] == [("otto", "abandon", body["evidence"])]
    assert receipt.envelope is not None and receipt.operation_ids == []

    retry = desk.client.post("/v1/commands/make_ticket", content=b'{"label": "boom"}',
                             headers={**auth("viewer"), **JSON, "Idempotency-Key": f'"{KEY}"'})
    assert retry.status_code == 409 and retry.headers["idempotent-replayed"] == "true"
    problem = retry.json()
    assert (problem["code"], problem["retryable"], problem["transaction_id"]) == ("command_abandoned", True, str(RID))
    assert desk.tickets() == 0  # nothing was ever applied

    refused = desk.client.post(path, json=body, headers=auth("operator"))
    assert refused.status_code == 409 and refused.json()["code"] == "action_refused"
    assert _attention(desk) == []
    assert _gauge(_metrics(desk)) == 0.0


def test_the_clients_retry_takes_it_off_the_queue_until_recovery_gives_up_again(desk: ReceiptDesk) -> None:
    recovery = _stuck(desk)
    assert _gauge(_metrics(desk)) == 1.0
    retry = desk.client.post("/v1/commands/make_ticket", content=b'{"label": "boom"}',
                             headers={**auth("viewer"), **JSON, "Idempotency-Key": f'"{KEY}"'})
    assert retry.status_code == 503  # it adopted the receipt and the handler threw again
    resolved = [e for e in desk.store.app.events.get(RID) if isinstance(e, Receipt.ReceiptResolved)]
    assert [(e.principal.startswith("serve:test:"), e.resolution) for e in resolved] == [(True, "adopted")]
    assert _gauge(_metrics(desk)) == 0.0 and _attention(desk) == []
    desk.clock.advance(6)  # type: ignore[attr-defined]
    assert recovery.run_once(desk.clock.now()).stopped == 1  # still over its budget: back on the queue
    assert _gauge(_metrics(desk)) == 1.0  # the queue reads the metrics read model, caught up here
    assert [row["receipt_id"] for row in _attention(desk)] == [str(RID)]
