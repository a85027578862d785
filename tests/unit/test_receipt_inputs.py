"""Command input outside HTTP: the demo's ``place_order`` model refuses what the ledger would
refuse at intend, so a bad URL or address is a 422 naming the field (tryout R4); the body limit
and sweep interval settings (R2, R16)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from adapters.demo.orders import PlaceOrder

GOOD = {"customer_email": "a@example.test", "amount_cents": 100, "payments_url": "http://127.0.0.1:1/pay",
        "notify_url": "https://example.test/n"}


def test_a_good_order_validates() -> None:
    assert PlaceOrder.model_validate(GOOD).payments_url == GOOD["payments_url"]


@pytest.mark.parametrize("field, value", [
    ("payments_url", "ftp://x/p"), ("payments_url", "http://u:pw@x/p"), ("notify_url", "not a url"),
    ("notify_url", "http://x/\u0000"), ("customer_email", "secretref:card"), ("customer_email", "no-at-sign"),
])
def test_a_bad_field_is_refused_by_the_model(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as refused:
        PlaceOrder.model_validate({**GOOD, field: value})
    assert refused.value.errors()[0]["loc"] == (field,)


def test_the_body_limit_and_the_sweep_interval_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tryout R2 and R16: ``OPLEDGER_RECEIPT_MAX_BODY_BYTES`` and
    ``OPLEDGER_RECEIPT_SWEEP_INTERVAL_SECONDS`` are read, and a malformed one names itself."""
    from adapters.http.commands import load_receipt_settings
    from ledger.errors import ConfigurationError

    monkeypatch.setenv("OPLEDGER_RECEIPT_MAX_BODY_BYTES", "65536")
    monkeypatch.setenv("OPLEDGER_RECEIPT_SWEEP_INTERVAL_SECONDS", "5")
    settings = load_receipt_settings()
    assert (settings.max_body_bytes, settings.sweep_interval_seconds) == (65536, 5.0)
    monkeypatch.setenv("OPLEDGER_RECEIPT_MAX_BODY_BYTES", "0")
    with pytest.raises(ConfigurationError, match="OPLEDGER_RECEIPT_MAX_BODY_BYTES"):
        load_receipt_settings()
