"""Which cutoff each integration's operations are archived by (issue 29 items 1 and 2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from adapters.archive_select import NoRetentionError, cutoffs
from adapters.cli.archive_run import parse_before
from ledger.declarations import Integration, Registry

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def registry(**retention: float | None) -> Registry:
    found = Registry()
    for name, seconds in retention.items():
        data = {"name": f"shop.{name}", "version": 1, "adapter": "fake", "delivery_mode": "idempotent"}
        found.declare(Integration.parse({**data, **({"retention_seconds": seconds} if seconds else {})}))
    return found


def test_each_integration_keeps_its_own_policy_or_the_stores() -> None:
    limits = cutoffs(registry(refund=3_600, notify=None), now=NOW, before=None, store_seconds=86_400)
    assert limits == {"shop.refund": NOW - timedelta(hours=1), "shop.notify": NOW - timedelta(days=1)}


def test_without_a_store_policy_only_declared_ones_are_archived() -> None:
    assert cutoffs(registry(refund=3_600, notify=None), now=NOW, before=None, store_seconds=None) == {
        "shop.refund": NOW - timedelta(hours=1)}


def test_before_sets_one_cutoff_for_all() -> None:
    cutoff = NOW - timedelta(days=3)
    assert cutoffs(registry(refund=3_600, notify=None), now=NOW, before=cutoff, store_seconds=None) == {
        "shop.refund": cutoff, "shop.notify": cutoff}


def test_nothing_to_archive_by_is_refused() -> None:
    with pytest.raises(NoRetentionError, match="--before"):
        cutoffs(registry(refund=None), now=NOW, before=None, store_seconds=None)


def test_before_is_a_time_with_its_offset_or_a_duration() -> None:
    assert parse_before("30d", NOW) == NOW - timedelta(days=30)
    assert parse_before("2026-11-01T00:00:00Z", NOW) == datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="no UTC offset"):
        parse_before("2026-11-01", NOW)
    with pytest.raises(ValueError, match="neither a time"):
        parse_before("yesterday", NOW)
