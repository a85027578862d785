"""The client helper: a fresh key per logical request, the same key on retries, backoff on 409
pending honouring Retry-After (issue 15 item 7)."""

from __future__ import annotations

import json

import pytest

from adapters.client import CommandClient, format_key
from ledger.inbound import canonical_request
from ledger.receipts import Receipt, receipt_id
from tests.receipt_desk import receipt_desk


def test_format_key_quotes_and_escapes() -> None:
    assert format_key('a"b\\c') == '"a\\"b\\\\c"'
    with pytest.raises(ValueError):
        format_key("")


def test_the_client_retries_a_pending_receipt_with_the_same_key_after_retry_after(database_url: str) -> None:
    with receipt_desk(database_url) as desk:
        request = canonical_request("make_ticket", "vera", json.dumps({"label": "a"}).encode())
        desk.store.app.save(Receipt.open(principal="vera", scope="make_ticket", key="held", request=request,
                                         owner="other:1", now=desk.clock.now(), lease_seconds=3))
        waits: list[float] = []

        def sleep(seconds: float) -> None:  # the injected clock moves as the client waits
            waits.append(seconds)
            desk.clock.advance(seconds)  # type: ignore[attr-defined]

        client = CommandClient("http://testserver", token="viewer-token", client=desk.client, sleep=sleep)
        response = client.send("make_ticket", {"label": "a"}, key="held")
        # Retry-After (1 s) is the least wait; the doubling backoff stretches it until the 3 s lease ran out.
        assert response.status_code == 201 and waits == [1.0, 1.0, 2.0]
        assert desk.runner.load(receipt_id("vera", "make_ticket", "held")).epoch == 2  # type: ignore[union-attr]
        one, two = client.send("make_ticket", {"label": "b"}), client.send("make_ticket", {"label": "b"})
        assert one.headers["opledger-transaction-id"] != two.headers["opledger-transaction-id"]  # fresh keys
        assert desk.tickets() == 3


def test_an_empty_key_is_refused_not_replaced_by_a_fresh_one(database_url: str) -> None:
    """Tryout R13: a persisted empty key must not become a new random key on every retry."""
    with receipt_desk(database_url) as desk:
        client = CommandClient("http://testserver", token="viewer-token", client=desk.client)
        with pytest.raises(ValueError):
            client.send("make_ticket", {"label": "a"}, key="")
        assert desk.tickets() == 0
