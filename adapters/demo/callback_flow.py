"""The demo's callback flow (issue 12 item 6): signed callbacks through ``opledger serve``, with
``serve`` SIGKILLed mid-callback, a forged and a replayed callback, checked against the partner.

Some orders also ask the warehouse to fulfil them (``orders.fulfil``, delivery mode
``callback``). The demo's workers send those requests with ``X-Callback-Url``. The partner
accepts them (202) and queues a signed callback each, which it retries until ``serve`` answers
2xx. Then, with the workers stopped (on SQLite one process owns the store, so the worker and a
writing ``serve`` take turns; on PostgreSQL the same order is kept):

1. ``serve`` starts with a failpoint that SIGKILLs it right after it commits the first callback,
   before it answers. The partner sees a dropped connection and retries;
2. ``serve`` starts again on the same port and takes the retries. The killed callback's retry
   is answered as a duplicate, so it is recorded once;
3. the partner sends a forged callback (signed with another secret) and replays a delivered one
   byte for byte: both must be refused;
4. a worker settles every fulfilment.

The summary compares the ledger with the partner's log: lost 0 (every fulfilment settled),
duplicate effects 0 (each applied once, and each callback recorded once), forged and replayed
accepted 0.
"""

from __future__ import annotations

import base64
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx

from adapters.demo.orders import FULFILMENT, OrdersApp
from adapters.http.callback_auth import callback_secret_name
from adapters.partner import PartnerLog
from adapters.processes import ServeProcess, WorkerProcess, free_port, spawn_serve, spawn_worker
from ledger.config import Database
from ledger.failpoints import FAILPOINT_ENV
from ledger.operation import Operation
from ledger.status import ExecutionState, SettlementState
from migrations.drivers import database_driver
from projections.rows import StatusRow
from projections.views import open_view

FULFILMENTS = 3
"""How many orders ask for fulfilment (at most the number of orders)."""
WAIT_SECONDS = 60.0


@dataclass
class CallbackFlow:
    """One run of the flow: its secret, its ``serve`` port, and the operations it follows."""

    directory: Path
    run_id: str
    secret: str = field(default_factory=lambda: "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode())
    port: int = field(default_factory=free_port)
    op_ids: list[UUID] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Where the partner calls back (``serve``'s base URL)."""
        return f"http://127.0.0.1:{self.port}"

    def worker_env(self) -> dict[str, str]:
        """Settings workers and ``serve`` need for the flow."""
        env_name = "OPLEDGER_SECRET_" + callback_secret_name(FULFILMENT.name).upper().replace(".", "_")
        return {"OPLEDGER_CALLBACK_BASE_URL": self.url, env_name: self.secret}

    def request(self, database: Database, payment_ids: list[UUID], partner_url: str) -> list[UUID]:
        """Ask the warehouse (the partner) to fulfil the orders of the first payments."""
        app = OrdersApp(env=database.library_env(create_table=False))
        try:
            for n, payment in enumerate(payment_ids[:FULFILMENTS]):
                order_id = app.get_operation(payment).source.entity_id
                self.op_ids.append(app.fulfil_order(order_id, fulfil_url=f"{partner_url}/fulfil/{n}"))
        finally:
            app.close()
        return self.op_ids

    def all_received(self, log: PartnerLog) -> bool:
        """Whether the warehouse has received every fulfilment request. The demo kills a worker
        only after this: a request recorded as started but never sent is, in callback mode,
        honestly waiting for a callback that cannot come until its deadline, which this
        flow's later steps (a forged and a replayed callback) cannot show."""
        keys = {r.idempotency_key for r in log.requests() if r.kind == "delivery"}
        return {str(op_id) for op_id in self.op_ids} <= keys

    def wait_accepted(self, database: Database, worker: WorkerProcess) -> None:
        """Wait while ``worker`` runs until every fulfilment is accepted (or further)."""
        wait_for_rows(database, self.op_ids, lambda row: row.execution != ExecutionState.PENDING.value
              and row.execution not in ("claimed", "dispatching"), alive=worker.alive)

    def run(self, database: Database, env: dict[str, str], log: PartnerLog, partner_url: str,
            say: Callable[..., None]) -> dict[str, Any]:
        """Steps 1-4 of the module docstring, with the workers stopped. Returns the summary."""
        serve_env = {**env, **self.worker_env()}
        write = not database_driver(database).shared  # serve owns a store no other process shares
        logs = self.directory / f"demo-serve-{self.run_id}.log"
        # Not waited for: a callback the partner retries may reach it, and kill it, before a
        # health check does. Killed by its failpoint (SIGKILL), not by an error of its start.
        doomed = spawn_serve({**serve_env, FAILPOINT_ENV: "callback:after"}, logs, port=self.port, write=write,
                             wait_ready=False)
        killed = _until(lambda: not doomed.alive()) and doomed.process.returncode == -signal.SIGKILL
        doomed.kill()
        say(f"serve (pid {doomed.process.pid}) SIGKILLed right after recording a callback, before answering it")
        served = spawn_serve(serve_env, logs, port=self.port, write=write)
        try:
            delivered = _until(lambda: {r.state for r in log.callbacks()} == {"delivered"}
                               and len(log.callbacks()) == len(self.op_ids))
            say(f"serve restarted; the partner's retries delivered {len(log.callbacks())} callbacks")
            forged, replayed = self._attack(database, partner_url)
            say(f"a forged callback was answered {forged}, a replayed one {replayed}")
        finally:
            _stop(served)
        worker = spawn_worker(env, self.directory / f"demo-worker-{self.run_id}-3.log")
        try:
            rows = wait_for_rows(database, self.op_ids, lambda row: row.settlement == SettlementState.SETTLED.value,
                         alive=worker.alive)
        finally:
            worker.terminate()
        return self._summary(database, log, rows, killed=killed and delivered, forged=forged, replayed=replayed)

    def _attack(self, database: Database, partner_url: str) -> tuple[int | None, int | None]:
        # Replay a callback whose last send is the very message the ledger recorded: not the one
        # serve was killed on (the first recorded; its retry was answered as a duplicate).
        app = OrdersApp(env=database.library_env(create_table=False, read_only=not database_driver(database).shared))
        try:
            recorded_at = {op_id: e.timestamp for op_id in self.op_ids for e in app.events.get(op_id)
                           if isinstance(e, Operation.CallbackReceived)}
        finally:
            app.close()
        replay_key = str(max(recorded_at, key=lambda op_id: recorded_at[op_id]) if recorded_at else self.op_ids[-1])
        with httpx.Client(base_url=partner_url, timeout=10) as client:
            forged = _sent_status(client.post("/_control/callbacks/forge", json={"key": str(self.op_ids[0])}))
            replayed = _sent_status(client.post("/_control/callbacks/replay", json={"key": replay_key}))
        return forged, replayed

    def _summary(self, database: Database, log: PartnerLog, rows: dict[UUID, Any], *, killed: bool,
                 forged: int | None, replayed: int | None) -> dict[str, Any]:
        app = OrdersApp(env=database.library_env(create_table=False, read_only=not database_driver(database).shared))
        try:
            recorded = {op_id: sum(isinstance(e, Operation.CallbackReceived) for e in app.events.get(op_id))
                        for op_id in self.op_ids}
        finally:
            app.close()
        applied = {op_id: log.applied_count(op_id) for op_id in self.op_ids}
        lost = [str(i) for i in self.op_ids if i not in rows or rows[i].settlement != SettlementState.SETTLED.value]
        duplicates = [str(i) for i in self.op_ids if applied[i] > 1 or recorded[i] > 1]
        return {
            "operations": len(self.op_ids),
            "by_status": {str(i): rows[i].status for i in rows},
            "serve_killed_mid_callback": killed,
            "callback_sends": len(log.callback_sends("send")),
            "callbacks_recorded": sum(recorded.values()),
            "forged_status": forged, "forged_accepted": int(forged is not None and 200 <= forged < 300),
            "replayed_status": replayed, "replayed_accepted": int(replayed is not None and 200 <= replayed < 300),
            "lost": len(lost), "lost_operations": lost,
            "duplicate_effects": len(duplicates), "duplicate_operations": duplicates,
        }


def _sent_status(answer: httpx.Response) -> int | None:
    """The status ``serve`` gave the callback the partner sent, or None when the partner had none
    to send (it answers 4xx; the summary then shows the attack as not made)."""
    try:
        status = answer.json().get("status") if answer.is_success else None
    except ValueError:
        return None
    return status if isinstance(status, int) else None


def _until(predicate: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def wait_for_rows(database: Database, op_ids: list[UUID], done: Callable[[StatusRow], bool],
                  alive: Callable[[], bool], *, timeout_seconds: float = WAIT_SECONDS) -> dict[UUID, StatusRow]:
    """Poll the status view until every row of ``op_ids`` is ``done``, ``alive()`` turns False
    or ``timeout_seconds`` (monotonic) pass; return the rows last read (by operation id)."""
    view = open_view(database, read_only=not database_driver(database).shared)
    rows: dict[UUID, StatusRow] = {}
    try:
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline and alive():
            rows = {i: row for i in op_ids if (row := view.get(i)) is not None}
            if len(rows) == len(op_ids) and all(done(row) for row in rows.values()):
                break
            time.sleep(0.1)
    finally:
        view.close()
    return rows


def _stop(served: ServeProcess) -> None:
    served.terminate()
