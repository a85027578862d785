"""A served operator's desk for the HTTP, console and evidence tests: the scripted run (plus a
refund awaiting approval) on a migrated store, the read models caught up, the app over it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from fastapi import FastAPI

from adapters.http.app import ServeConfig, attach, build_app
from adapters.http.auth import TokenGrant
from adapters.runtime import Store, open_store
from ledger.clock import FakeClock
from ledger.config import Database, Settings
from projections.metrics import MetricsProjection
from projections.metrics_store import MetricsStore
from projections.status import StatusProjection
from projections.views import open_view
from tests.observe_seed import DeskApp, seed

APP_TOPIC = "tests.observe_seed:DeskApp"
TOKENS = {
    "viewer-token": TokenGrant(principal="vera", roles=["viewer"]),
    "operator-token": TokenGrant(principal="otto", roles=["operator"]),
    "approver-token": TokenGrant(principal="anna", roles=["approver"]),
    "all-token": TokenGrant(principal="root", roles=["viewer", "operator", "approver"]),
}


def auth(role: str) -> dict[str, str]:
    """Headers carrying the test token of ``role``."""
    return {"Authorization": f"Bearer {role}-token"}


@dataclass
class Desk:
    """The seeded store, open for writing, and the app serving it."""

    ids: dict[str, UUID]
    store: Store
    app: FastAPI
    clock: FakeClock
    database_url: str


def seeded(database_url: str) -> tuple[dict[str, UUID], FakeClock]:
    """Migrate, run the script, add a refund awaiting approval, catch both read models up."""
    from tests.stores import migrated_store

    database = Database.parse(database_url)
    migrated_store(database, DeskApp)
    clock = FakeClock()
    app = DeskApp(env=database.library_env(create_table=False), clock=clock)
    try:
        ids = dict(seed(app, clock))
        ids["refund"] = app.request_refund(500)
        view = open_view(database)
        StatusProjection(app=app, view=view).catch_up()
        MetricsProjection(app=app, store=MetricsStore(view)).catch_up()
        view.close()
    finally:
        app.close()
    return ids, clock


@contextmanager
def desk(database_url: str, *, app: FastAPI | None = None, **config: Any) -> Iterator[Desk]:
    """A seeded store, opened for writing, served by ``create_app`` with the test tokens (or
    attached to ``app``, from ``build_app``)."""
    ids, clock = seeded(database_url)
    settings = Settings(database_url=database_url, app=APP_TOPIC)
    with open_store(settings, write=True, clock=clock) as store:
        app = attach(app or build_app(), store=store, config=ServeConfig(**{"tokens": TOKENS, **config}), clock=clock)
        yield Desk(ids=ids, store=store, app=app, clock=clock, database_url=database_url)
