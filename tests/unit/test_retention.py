"""Retention: what counts as closed and kept long enough, and how the policy is set (issue 29 item 1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from ledger.config import Settings
from ledger.declarations import Integration
from ledger.errors import DeclarationError, NaiveDatetimeError
from ledger.retention import cutoff_for, is_archivable, parse_duration, retention_for

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
CUTOFF = NOW - timedelta(days=30)
OLD = CUTOFF - timedelta(seconds=1)


def archivable(execution: str = "succeeded", settlement: str = "settled", disposition: str | None = "settled",
               attention: str | None = None, closed_at: datetime = OLD) -> bool:
    return is_archivable(execution=execution, settlement=settlement, disposition=disposition,
                         attention=attention, closed_at=closed_at, cutoff=CUTOFF)


@pytest.mark.parametrize(("execution", "settlement", "disposition"), [
    ("succeeded", "settled", "settled"),
    ("failed", "settled", "settled"),
    ("succeeded", "not_required", None),
    ("cancelled", "not_required", "cancelled"),
    ("succeeded", "not_required", "resolved"),
    ("ambiguous", "none", "abandoned"),
    ("succeeded", "blocked", "abandoned"),
])
def test_closed_operations_older_than_the_cutoff_are_archivable(execution: str, settlement: str,
                                                                disposition: str | None) -> None:
    assert archivable(execution, settlement, disposition)


@pytest.mark.parametrize(("execution", "settlement", "disposition"), [
    ("pending", "none", None),
    ("claimed", "none", None),
    ("dispatching", "none", None),
    ("accepted", "none", None),
    ("ambiguous", "none", None),           # waits for an operator
    ("succeeded", "pending", None),        # pending settlement
    ("succeeded", "blocked", None),        # settlement blocked, on the queue
    ("failed", "none", None),
])
def test_open_operations_are_never_archivable(execution: str, settlement: str, disposition: str | None) -> None:
    assert not archivable(execution, settlement, disposition)


def test_pending_settlement_is_kept_even_when_abandoned_before() -> None:
    assert not archivable("succeeded", "pending", "abandoned")


def test_an_operation_on_the_attention_queue_is_kept() -> None:
    assert not archivable(attention="late_observation")


def test_the_cutoff_is_strict() -> None:
    assert not archivable(closed_at=CUTOFF)
    assert not archivable(closed_at=NOW)
    assert archivable(closed_at=CUTOFF - timedelta(microseconds=1))


def test_naive_times_are_refused() -> None:
    with pytest.raises(NaiveDatetimeError):
        archivable(closed_at=OLD.replace(tzinfo=None))
    with pytest.raises(NaiveDatetimeError):
        cutoff_for(NOW.replace(tzinfo=None), 60)


def test_cutoff_is_now_minus_the_retention() -> None:
    assert cutoff_for(NOW, 86_400) == NOW - timedelta(days=1)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90d", 90 * 86_400), ("12h", 43_200), ("30m", 1_800), ("45s", 45), ("2w", 1_209_600),
    ("3600", 3_600), ("1.5", 1.5), (" 7d ", 7 * 86_400),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "0d", "-1d", "ten days", "5y", "1e3", "1000000w", "nan"])
def test_bad_durations_are_refused_with_the_forms_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_the_integration_overrides_the_store() -> None:
    assert retention_for(None, None) is None
    assert retention_for(86_400, None) == 86_400
    assert retention_for(86_400, 3_600) == 3_600
    assert retention_for(None, 3_600) == 3_600


def test_the_store_setting_is_off_by_default_and_read_as_a_duration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPLEDGER_RETENTION", raising=False)
    assert Settings().retention_seconds is None
    monkeypatch.setenv("OPLEDGER_RETENTION", "90d")
    assert Settings().retention_seconds == 90 * 86_400
    monkeypatch.setenv("OPLEDGER_RETENTION", "soon")
    with pytest.raises(ValidationError, match="retention"):
        Settings()


DECLARATION = {"name": "shop.refund", "version": 1, "adapter": "fake", "delivery_mode": "idempotent"}


def test_the_declaration_may_set_its_own_retention_without_changing_older_digests() -> None:
    plain = Integration.parse(DECLARATION)
    assert plain.retention_seconds is None
    kept = Integration.parse({**DECLARATION, "retention_seconds": 7 * 86_400})
    assert kept.retention_seconds == 7 * 86_400
    assert kept.digest != plain.digest
    with pytest.raises(DeclarationError, match="retention_seconds"):
        Integration.parse({**DECLARATION, "retention_seconds": 0})
