"""A served ``CommandsApp`` (tests.apps) for the receipt tests: a migrated store, the app over it
with test tokens and a receipt runner on an injected clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from eventsourcing.utils import get_topic
from fastapi import FastAPI
from fastapi.testclient import TestClient

from adapters.http.app import ServeConfig, attach, build_app
from adapters.runtime import Store, open_store
from ledger.clock import Clock, FakeClock
from ledger.config import Database, Settings
from ledger.receipt_runner import ReceiptRunner
from tests.apps import CommandsApp, Ticket
from tests.desk import TOKENS

APP_TOPIC = "tests.apps:CommandsApp"
LEASE_SECONDS = 5.0


@dataclass
class ReceiptDesk:
    store: Store
    app: FastAPI
    client: TestClient
    runner: ReceiptRunner
    clock: Clock

    def tickets(self) -> int:
        """How many tickets were ever opened (``Ticket.Opened`` records)."""
        return len(self.store.app.recorder.select_notifications(
            start=None, limit=10_000, topics=[get_topic(Ticket.Opened)]))  # type: ignore[attr-defined]


def migrate_commands(database_url: str) -> None:
    from tests.stores import migrated_store

    migrated_store(Database.parse(database_url), CommandsApp)


@contextmanager
def receipt_desk(database_url: str, *, clock: Clock | None = None, migrate: bool = True,
                 lease_seconds: float = LEASE_SECONDS, owner: str = "serve:test") -> Iterator[ReceiptDesk]:
    """The app over a (fresh, migrated) store for ``CommandsApp``."""
    if migrate:
        migrate_commands(database_url)
    clock = clock or FakeClock()
    settings = Settings(database_url=database_url, app=APP_TOPIC)
    with open_store(settings, write=True, clock=clock) as store:
        app = attach(build_app(), store=store, config=ServeConfig(tokens=TOKENS), clock=clock)
        runner = ReceiptRunner(app=store.app, clock=clock, owner_prefix=owner, lease_seconds=lease_seconds)
        app.state.receipt_runner = runner
        with TestClient(app, raise_server_exceptions=False) as client:
            yield ReceiptDesk(store=store, app=app, client=client, runner=runner, clock=clock)
