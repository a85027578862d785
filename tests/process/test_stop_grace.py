"""A worker answers SIGTERM within its grace period, even with a call still on the wire.

Source: issue 10 item 3 ("a worker always answers SIGTERM within its grace period"); DESIGN §7.
"""

from __future__ import annotations

import signal
import time
from uuid import UUID

import httpx
import pytest

from adapters.partner import PartnerProcess
from ledger.config import Database
from ledger.declarations import DeliveryMode
from tests.apps import ModesApp, declaration
from tests.conftest import wait_until
from tests.process.conftest import worker_env

pytestmark = pytest.mark.process

GRACE_SECONDS = 3.0
MARGIN_SECONDS = 4.0
"""Past the grace: recording, closing the store and (PostgreSQL) joining the projection thread."""
CALL_SECONDS = 60.0
"""How long the partner holds the call: far past the grace, under the client timeout."""


class SlowCallsApp(ModesApp):
    """``ModesApp``'s store and name, with an idempotent integration that waits long for answers."""

    name = "modes"
    integrations = [declaration(DeliveryMode.IDEMPOTENT, request_timeout_seconds=120.0)]


def test_sigterm_with_a_call_in_flight_exits_within_grace(modes_db: Database, database_url: str,
                                                          partner: PartnerProcess, workers) -> None:
    httpx.post(f"{partner.url}/_control/faults",
               json={"path": "/hold", "fault": {"delay": CALL_SECONDS}}).raise_for_status()
    app = SlowCallsApp(env=modes_db.library_env(create_table=False))
    try:
        op_id: UUID = app.make("idempotent", f"{partner.url}/hold")
    finally:
        app.close()
    worker = workers(worker_env(database_url, app="tests.process.test_stop_grace:SlowCallsApp",
                                lease_seconds=30.0, OPLEDGER_GRACE_SECONDS=str(GRACE_SECONDS)))
    wait_until(lambda: partner.log.requests(str(op_id)), what="the call on the wire")
    started = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    code = worker.process.wait(CALL_SECONDS)
    took = time.monotonic() - started
    assert code == 0
    assert took <= GRACE_SECONDS + MARGIN_SECONDS, f"took {took:.1f} s to stop"
