"""Helpers for the callback tests: an operation of ``tests.apps:ModesApp``'s callback integration
driven to ``accepted`` through the aggregate's own commands, the app serving the store, and
Standard Webhooks callbacks signed the way the reference partner signs them."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from fastapi import FastAPI
from fastapi.testclient import TestClient

from adapters.http.app import ServeConfig, attach, build_app
from adapters.partner.callbacks import callback_body, signed_headers
from adapters.runtime import Store, open_store
from executors.secrets import EnvironmentSecrets
from ledger.clock import FakeClock
from ledger.config import Settings
from ledger.declarations import DeliveryMode
from tests.apps import ModesApp

INTEGRATION = "test.callback"
CALLBACK_SECRET = "whsec_" + base64.b64encode(b"opledger-callback-tests-secret!!").decode()
WRONG_SECRET = "whsec_" + base64.b64encode(b"an-attacker-guessing-the-secret!").decode()
APP_TOPIC = "tests.apps:ModesApp"


@dataclass
class CallbackDesk:
    """A migrated ``ModesApp`` store, opened for writing and served; the test's clock."""

    store: Store
    app: FastAPI
    client: TestClient
    clock: FakeClock

    @property
    def ledger(self) -> ModesApp:
        app = self.store.app
        assert isinstance(app, ModesApp)
        return app

    def log_length(self) -> int:
        """The notification log's length: every event on every stream."""
        return int(self.ledger.recorder.max_notification_id() or 0)

    def accepted(self, n: int = 0, *, follow_for: float | None = None) -> tuple[UUID, UUID]:
        """A callback-mode operation driven to ``accepted``; returns (operation id, attempt id).
        ``follow_for``: record it as a worker does, followed for a callback until this many
        seconds after acceptance (the hard limit), else as an acceptance recorded before
        follow-up existed (its ``accepted`` deadline ends it)."""
        op_id = self.ledger.make(DeliveryMode.CALLBACK, "http://provider.invalid/hook", n=n)
        op = self.ledger.get_operation(op_id)
        now = self.clock.now()
        epoch = op.claim(now=now, worker_id="w1", lease_seconds=30)
        attempt = uuid4()
        op.start_attempt(epoch=epoch, now=now, attempt_id=attempt, request_fingerprint="r")
        follow = {} if follow_for is None else {"follow": "callback",
                                                 "follow_until": now + timedelta(seconds=follow_for)}
        op.accept(epoch=epoch, now=now, attempt_id=attempt, remote_id=f"rop_{op_id}", **follow)
        self.ledger.save(op)
        return op_id, attempt

    def post(self, op_id: UUID, attempt: UUID, *, callback_id: str = "msg_1", outcome: str = "succeeded",
             secret: str = CALLBACK_SECRET, at: datetime | None = None, integration: str = INTEGRATION,
             headers: dict[str, str] | None = None, remote_status: str = "done", detail: str = "") -> Any:
        """Sign and post a callback; returns the response."""
        body = callback_body(operation_id=str(op_id), attempt_id=str(attempt), outcome=outcome,
                             remote_status=remote_status, detail=detail)
        signed = signed_headers(secret, callback_id=callback_id, at=at or self.clock.now(), body=body)
        return self.client.post(f"/callbacks/{integration}", content=body, headers=headers or signed)

    def send(self, body: bytes, headers: dict[str, str], integration: str = INTEGRATION) -> Any:
        """Post exactly these bytes and headers (a replay)."""
        return self.client.post(f"/callbacks/{integration}", content=body, headers=headers)


def all_delivered(log: Any) -> Callable[[], bool]:
    """A ``wait_until`` predicate: the partner's log (``adapters.partner.PartnerLog``) holds every
    callback as delivered. The partner marks one so only once the receiver's answer is back, which
    may be after the operation settled (and, when serve died after committing, after its retry)."""
    return lambda: {row.state for row in log.callbacks()} == {"delivered"}


@contextmanager
def callback_desk(database_url: str, *, writable: bool = True) -> Iterator[CallbackDesk]:
    """Migrate ``ModesApp`` into the store at ``database_url`` and serve it."""
    from ledger.config import Database
    from tests.stores import migrated_store

    migrated_store(Database.parse(database_url), ModesApp)
    clock = FakeClock()
    settings = Settings(database_url=database_url, app=APP_TOPIC)
    secrets = EnvironmentSecrets({f"callback.{INTEGRATION}": CALLBACK_SECRET})
    with open_store(settings, write=True, clock=clock) as store:
        app = attach(build_app(), store=store, clock=clock,
                     config=ServeConfig(writable=writable, callback_secrets=secrets))
        with TestClient(app) as client:
            yield CallbackDesk(store=store, app=app, client=client, clock=clock)
