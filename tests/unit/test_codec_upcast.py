"""Upcasting ledger events: records written by a v1 class load after a v2 change.

The v2 class takes over the v1 class's topic, as after a deploy: the stored records keep their
topic, the code behind it changed. Stored with the real SQLite recorder.

Source: DESIGN §6; eventsourcing 9.5 ``Mapper`` (``class_version`` and ``upcast_vN_vN+1``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing import utils as es_utils
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from ledger.codec import LedgerEvent, LedgerMapper
from ledger.errors import CorruptRecordError

UTC = UTC
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Wallet(Aggregate):
    """A test aggregate whose events opt in to the ledger codec."""

    class Opened(LedgerEvent, Aggregate.Created):
        owner: str

        def apply(self, wallet: Wallet) -> None:
            wallet.owner = self.owner
            wallet.charges = []

    class Charged(LedgerEvent, Aggregate.Event):
        """Version 1: an amount, no currency."""

        amount: Decimal

        def apply(self, wallet: Wallet) -> None:
            wallet.charges.append((self.amount, "EUR"))

    owner: str
    charges: list[tuple[Decimal, str]]

    def __init__(self) -> None:
        pass


CHARGED = get_topic(Wallet.Charged)


class ChargedV2(LedgerEvent, Aggregate.Event):
    """Version 2 of ``Wallet.Charged``: adds ``currency`` and a charge time (UTC)."""

    __qualname__ = "Wallet.Charged"  # same topic as v1: this is the same event, changed
    class_version = 2

    amount: Decimal
    currency: str
    charged_at: datetime | None

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        # Every v1 charge was in euros; v1 did not record a separate charge time.
        state["currency"] = "EUR"
        state["charged_at"] = None

    def apply(self, wallet: Wallet) -> None:
        wallet.charges.append((self.amount, self.currency))


@pytest.fixture
def deploy_v2(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make the stored topic of ``Wallet.Charged`` resolve to the v2 class, as a deploy would."""
    monkeypatch.setitem(es_utils._topic_cache, CHARGED, ChargedV2)
    monkeypatch.setattr(Wallet, "Charged", ChargedV2)
    assert get_topic(ChargedV2) == CHARGED
    yield


def app_at(path: Path) -> Application[UUID]:
    return Application[UUID](env={
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(path),
        "MAPPER_TOPIC": "ledger.codec:LedgerMapper",
    })


def write_v1_history(path: Path) -> UUID:
    app = app_at(path)
    wallet = Wallet._create(Wallet.Opened, timestamp=T0, owner="alice")
    wallet.trigger_event(Wallet.Charged, timestamp=T0 + timedelta(seconds=1), amount=Decimal("0.1000"))
    wallet.trigger_event(Wallet.Charged, timestamp=T0 + timedelta(seconds=2), amount=Decimal("2E+1"))
    app.save(wallet)
    app.close()
    return wallet.id


def stored_states(app: Application[UUID], wallet_id: UUID) -> list[dict[str, Any]]:
    return [json.loads(r.state) for r in app.recorder.select_events(wallet_id)]


def test_v1_records_load_after_the_v2_change(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    path = tmp_path / "wallets.db"
    wallet_id = write_v1_history(path)

    request.getfixturevalue("deploy_v2")
    app = app_at(path)
    v1_states = stored_states(app, wallet_id)
    assert "class_version" not in v1_states[1] and v1_states[1]["amount"] == "0.1000"

    wallet = app.repository.get(wallet_id)
    assert wallet.charges == [(Decimal("0.1000"), "EUR"), (Decimal("2E+1"), "EUR")]
    assert str(wallet.charges[0][0]) == "0.1000"  # the exponent survived the upcast too
    events = list(app.events.get(wallet_id))
    assert [type(e) for e in events[1:]] == [ChargedV2, ChargedV2]
    assert events[1].currency == "EUR" and events[1].charged_at is None

    # New v2 events are stored with their class version, and mixed histories load.
    wallet.trigger_event(ChargedV2, timestamp=T0 + timedelta(seconds=3), amount=Decimal("5"),
                         currency="USD", charged_at=T0 + timedelta(seconds=3))
    app.save(wallet)
    assert stored_states(app, wallet_id)[3]["class_version"] == 2
    reloaded = app.repository.get(wallet_id)
    assert reloaded.charges == [(Decimal("0.1000"), "EUR"), (Decimal("2E+1"), "EUR"), (Decimal("5"), "USD")]
    assert list(app.events.get(wallet_id))[3].charged_at == T0 + timedelta(seconds=3)
    app.close()


def test_upcast_output_is_checked_strictly(tmp_path: Path, deploy_v2: None) -> None:
    app = app_at(tmp_path / "w.db")
    wallet_id = UUID(int=7)
    mapper = app.mapper
    assert isinstance(mapper, LedgerMapper)

    def record(state: dict[str, Any], version: int = 2) -> StoredEvent:
        return StoredEvent(originator_id=wallet_id, originator_version=version, topic=CHARGED,
                           state=json.dumps(state).encode())

    ok = mapper.to_domain_event(record({"timestamp": "2026-03-01T12:00:00Z", "amount": "1.5"}))
    assert ok.currency == "EUR" and ok.amount == Decimal("1.5")
    for state, reason in [
        # v1 records are still strict: the upcaster does not paper over a bad value...
        ({"timestamp": "2026-03-01T12:00:00Z", "amount": True}, "Expected `decimal`, got `bool`"),
        ({"timestamp": "2026-03-01T12:00:00Z", "amount": "1,5"}, "Invalid decimal"),
        ({"timestamp": "2026-03-01T12:00:00", "amount": "1.5"}, "timezone"),
        ({"timestamp": "2026-03-01T12:00:00Z", "amount": "1.5", "memo": "x"}, "unknown field `memo`"),
        # ...nor a version this code does not know, nor a v2 record missing what v2 requires.
        ({"timestamp": "2026-03-01T12:00:00Z", "amount": "1.5", "class_version": 3}, "class_version 3"),
        ({"timestamp": "2026-03-01T12:00:00Z", "amount": "1.5", "class_version": "2"}, "class_version '2'"),
        ({"timestamp": "2026-03-01T12:00:00Z", "amount": "1.5", "class_version": 2}, "currency"),
        ({"timestamp": "2026-03-01T12:00:00Z", "amount": "1.5", "currency": "E\u0000R", "charged_at": None,
          "class_version": 2}, "NUL"),
        ([1], "JSON object"),
    ]:
        with pytest.raises(CorruptRecordError, match=f"operation {wallet_id} at position 2") as info:
            mapper.to_domain_event(record(state))  # type: ignore[arg-type]
        assert reason in str(info.value), (state, str(info.value))
    app.close()


def test_missing_upcaster_fails_closed(monkeypatch: pytest.MonkeyPatch, deploy_v2: None) -> None:
    class ChargedV3(ChargedV2):
        __qualname__ = "Wallet.Charged"
        class_version = 3

    monkeypatch.setitem(es_utils._topic_cache, CHARGED, ChargedV3)
    mapper = LedgerMapper(transcoder=None)  # type: ignore[arg-type]
    record = StoredEvent(originator_id=UUID(int=1), originator_version=2, topic=CHARGED,
                         state=b'{"timestamp":"2026-03-01T12:00:00Z","amount":"1"}')
    with pytest.raises(CorruptRecordError, match="no upcast_v2_v3"):
        mapper.to_domain_event(record)
