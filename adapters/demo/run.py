"""``opledger demo``: the product's main job, end to end, with a crash in the middle.

1. Make a fresh store (embedded SQLite under ``.opledger/`` unless ``--database-url`` says
   otherwise) and start the reference partner as a separate process on a free loopback port.
2. Place orders: each ``Placed`` event is co-committed with two intents, an idempotent payment
   call and a non-idempotent notification webhook. Some partner paths are set to be slow, to
   throttle, to refuse, or to drop the connection.
3. Start a worker process, SIGKILL it while attempts are in flight, start a new one.
4. Wait until every operation is settled or needs an operator, and compare the ledger with the
   partner's own durable log: nothing lost, no effect applied twice.
5. The callback flow (``adapters.demo.callback_flow``): fulfilments in ``callback`` mode,
   answered by the partner's signed callbacks through ``opledger serve``, which is SIGKILLed
   mid-callback and restarted; a forged and a replayed callback are refused.

Beside the orders runs the long-running-operation flow (``adapters.demo.lro_flow``): workspaces
provisioned on the partner's mock LRO provider, polled, one cancelled mid-flight between the two
workers; the first worker is killed while they are being polled.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
from rich.console import Console
from rich.table import Table

from adapters.cli.common import cell
from adapters.demo import lro_flow
from adapters.demo.callback_flow import CallbackFlow, wait_for_rows
from adapters.demo.orders import OrdersApp, new_email
from adapters.operator import timeline_entries
from adapters.partner import PartnerLog, start_partner_process
from adapters.processes import WorkerProcess, children_stopped, spawn_worker
from ledger.config import Database
from ledger.declarations import DeliveryMode
from ledger.persistence import StoreLock
from ledger.redaction import mask_url
from ledger.status import ExecutionState, SettlementState, is_quiescent
from ledger.store_files import STORE_DIR_MODE
from migrations import migrate
from migrations.drivers import database_driver
from projections.rows import StatusRow

DEMO_DIR = Path(".opledger")
LEASE_SECONDS = 2.0
SLOW_SECONDS = 1.5  # under the 2 s client timeout: only a crash makes these lose their response
TIMEOUT_SECONDS = 3.0  # over it: the response is lost although the partner applied the effect
SETTLE_TIMEOUT_SECONDS = 90.0
APP_TOPIC = "adapters.demo.orders:OrdersApp"


@dataclass(frozen=True)
class Scenario:
    """What the partner does to order ``n``'s payment and notification (fault specs, or None)."""

    payment: dict[str, Any] | None
    notification: dict[str, Any] | None


def scenario(n: int) -> Scenario:
    """The demo's fault plan: a deterministic mix, so every run shows every honest outcome."""
    payment: dict[str, Any] | None = None
    notification: dict[str, Any] | None = None
    if n % 3 == 0:
        payment = {"delay": SLOW_SECONDS, "times": 1}  # in flight when the worker is killed
        notification = {"delay": SLOW_SECONDS, "times": 1}
    elif n % 6 == 1:
        payment = {"delay": TIMEOUT_SECONDS, "times": 1, "apply": "before"}  # timeout after apply
    elif n % 6 == 2:
        payment = {"status": 503, "retry_after": "1", "times": 2}  # throttled, then accepted
    elif n % 6 == 4:
        payment = {"status": 422}  # refused: failed, not retryable
        notification = {"drop": True, "apply": "before", "times": 1}  # response lost
    return Scenario(payment, notification)


def run_demo(*, database_url: str | None, as_json: bool, orders: int) -> int:
    """Run the demo. Returns the exit code: 0, or 1 when anything was lost or applied twice."""
    console = Console(stderr=as_json, soft_wrap=True)
    say = (lambda *a: None) if as_json else console.print
    DEMO_DIR.mkdir(mode=STORE_DIR_MODE, exist_ok=True)  # it holds the store: doctor's rule for its directory
    run_id = time.strftime("%Y%m%dT%H%M%S")
    database = _fresh_database(database_url)
    migrate(database, OrdersApp)
    webhook_secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    partner_log = DEMO_DIR / f"demo-partner-{run_id}.db"
    say(f"[bold]opledger demo[/] store: {database_driver(database).describe()}")
    flow = CallbackFlow(directory=DEMO_DIR, run_id=run_id)
    # Every worker and serve the demo starts is stopped when it ends, Ctrl-C and SIGTERM included.
    with children_stopped(), start_partner_process(log_path=partner_log, secret=webhook_secret,
                                                   callback_secret=flow.secret) as partner:
        say(f"partner listening on {partner.url} (log {partner_log})")
        op_ids, modes = _place_orders(database, partner.url, orders)
        say(f"placed {orders} orders: {len(op_ids)} operations intended, each co-committed with its order")
        fulfilments = flow.request(database, op_ids[0::2], partner.url)
        say(f"{len(fulfilments)} orders asked the warehouse for fulfilment (callback mode)")
        workspaces = _start_flow(database, partner.url)
        op_ids.extend(workspaces)
        modes.update(lro_flow.modes(workspaces))
        say(f"requested {len(workspaces)} workspaces: long-running provisioning operations, polled")
        env = {
            "OPLEDGER_DATABASE_URL": database.url(), "OPLEDGER_APP": APP_TOPIC,
            "OPLEDGER_LEASE_SECONDS": str(LEASE_SECONDS), "OPLEDGER_WEBHOOK_SECRET": webhook_secret,
            "OPLEDGER_SECRET_DEMO_CARD": "tok_demo_4242", "OPLEDGER_POLL_INTERVAL_SECONDS": "0.05",
            "OPLEDGER_LOG_FORMAT": "json", "OPLEDGER_GRACE_SECONDS": "5", **flow.worker_env(),
            "OPLEDGER_POLL_LEASE_SECONDS": str(lro_flow.POLL_LEASE_SECONDS),
        }
        first = spawn_worker(env, DEMO_DIR / f"demo-worker-{run_id}-1.log")
        in_flight = _kill_when_in_flight(first, partner.log, op_ids,
                                         ready=lambda: lro_flow.mid_flight(partner.log, workspaces)
                                         and flow.all_received(partner.log))
        say(f"worker 1 (pid {first.pid}) SIGKILLed with {in_flight} partner calls still unanswered, "
            "mid-poll of the provisioning operations")
        cancelled_in = lro_flow.cancel_mid_flight(database, OrdersApp, workspaces)
        say(f"cancel requested for workspace {lro_flow.CANCELLED_LABEL} while {cancelled_in}")
        second = spawn_worker(env, DEMO_DIR / f"demo-worker-{run_id}-2.log")
        say(f"worker 2 (pid {second.pid}) started; recovering and waiting for every operation to settle")
        rows = _wait_quiescent(database, op_ids, second)
        flow.wait_accepted(database, second)
        second.terminate()
        summary = _summary(database, op_ids, modes, rows, partner.log)
        summary["lro"] = lro_flow.summary(workspaces, rows, partner.log)
        summary["lro"]["resumed_by_another_worker"] = lro_flow.resumed_by_another_worker(database, OrdersApp,
                                                                                         workspaces)
        summary["partner_log"] = str(partner_log)
        summary["killed_in_flight"] = in_flight
        summary["callbacks"] = flow.run(database, env, partner.log, partner.url, say)
    if as_json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        _print_summary(console, summary, database)
    return 0 if _clean(summary) else 1


def _clean(summary: dict[str, Any]) -> bool:
    callbacks = summary["callbacks"]
    return (summary["lost"] == 0 and summary["duplicate_effects"] == 0 and not summary["lro"]["mismatches"]
            and callbacks["lost"] == 0 and callbacks["duplicate_effects"] == 0
            and callbacks["forged_accepted"] == 0 and callbacks["replayed_accepted"] == 0)


def _start_flow(database: Database, partner_url: str) -> dict[UUID, lro_flow.Provisioning]:
    app = OrdersApp(env=database.library_env(create_table=False))
    try:
        return lro_flow.place(app, partner_url)
    finally:
        app.close()  # releases the SQLite store for the worker processes


def _fresh_database(database_url: str | None) -> Database:
    if database_url is None:
        path = (DEMO_DIR / "demo.db").resolve()
        with StoreLock(path):  # never delete a store another process (a worker) still owns
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
        return Database.in_file(path)
    database = Database.parse(database_url)
    if database_driver(database).shared and database.schema is None:
        # A schema of its own, so the demo never mixes with (or needs) an existing store.
        database = Database.parse(f"{database_url}{'&' if '?' in database_url else '?'}schema=opledger_demo")
        database_driver(database).schema_drop()
    return database


def _place_orders(database: Database, partner_url: str, orders: int) -> tuple[list[UUID], dict[UUID, str]]:
    op_ids: list[UUID] = []
    modes: dict[UUID, str] = {}
    app = OrdersApp(env=database.library_env(create_table=False))
    try:
        with httpx.Client(base_url=partner_url) as client:
            for n in range(orders):
                plan = scenario(n)
                for path, fault in ((f"/pay/{n}", plan.payment), (f"/notify/{n}", plan.notification)):
                    if fault is not None:
                        client.post("/_control/faults", json={"path": path, "fault": fault}).raise_for_status()
                # Each order as a host's request would place it: in its own trace (W3C Trace
                # Context), which the intents keep and the evidence shows (issue 31).
                _, ids = app.place_order(customer_email=new_email(), amount_cents=1000 + n,
                                         payments_url=f"{partner_url}/pay/{n}", notify_url=f"{partner_url}/notify/{n}",
                                         traceparent=f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01")
                op_ids.extend(ids)
                modes[ids[0]] = DeliveryMode.IDEMPOTENT.value
                modes[ids[1]] = DeliveryMode.NON_IDEMPOTENT.value
    finally:
        app.close()  # releases the SQLite store for the worker processes
    return op_ids, modes


def _kill_when_in_flight(worker: WorkerProcess, log: PartnerLog, op_ids: list[UUID],
                         ready: Callable[[], bool] = lambda: True) -> int:
    """SIGKILL the worker once slow partner calls are under way (and ``ready`` says the rest of
    the stage is set); return how many calls were unanswered."""
    keys = {str(i) for i in op_ids}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and worker.alive():
        requests = [r for r in log.requests() if r.kind == "delivery" and r.idempotency_key in keys]
        slow = [r for r in requests if r.fault and "delay" in r.fault]
        if len(slow) >= 2 and ready():
            time.sleep(SLOW_SECONDS / 3)  # well inside the partner's delay: responses not sent yet
            break
        time.sleep(0.02)
    worker.kill()
    unanswered = [r for r in log.requests() if r.kind == "delivery" and r.idempotency_key in keys
                  and r.fault and "delay" in r.fault]
    return len(unanswered)


def _wait_quiescent(database: Database, op_ids: list[UUID], worker: WorkerProcess) -> dict[UUID, StatusRow]:
    return wait_for_rows(database, op_ids, _quiescent, worker.alive, timeout_seconds=SETTLE_TIMEOUT_SECONDS)


def _quiescent(row: StatusRow) -> bool:
    return is_quiescent(ExecutionState(row.execution), SettlementState(row.settlement))


def _summary(database: Database, op_ids: list[UUID], modes: dict[UUID, str], rows: dict[UUID, StatusRow],
             log: PartnerLog) -> dict[str, Any]:
    effects: dict[str, dict[str, int]] = {}
    duplicates = []
    mismatches = []
    for op_id in op_ids:
        key = str(op_id)
        deliveries = [r for r in log.requests(key) if r.kind == "delivery" and r.signature_valid]
        applied = sum(r.applied for r in deliveries)
        first_applied = next((r.seq for r in deliveries if r.applied), None)
        resent_after_apply = sum(1 for r in deliveries if first_applied is not None and r.seq > first_applied)
        effects[key] = {"received": len(deliveries), "applied": applied, "resent_after_apply": resent_after_apply}
        # A provider without idempotency would have applied every resend after the first apply.
        if applied > 1 or (modes[op_id] == DeliveryMode.NON_IDEMPOTENT.value and resent_after_apply):
            duplicates.append(key)
        row = rows.get(op_id)
        if row is not None and row.execution == "succeeded" and applied != 1:
            mismatches.append(key)
    lost = [str(i) for i in op_ids if i not in rows or not _quiescent(rows[i])]
    return {
        "operations": len(op_ids),
        "by_status": dict(Counter(r.status for r in rows.values())),
        "attempts": sum(r.attempts for r in rows.values()),
        "ambiguous": {str(i): r.ambiguity_reason for i, r in rows.items() if r.execution == "ambiguous"},
        "attention": {str(i): r.attention for i, r in rows.items() if r.attention},
        "lost": len(lost),
        "lost_operations": lost,
        "duplicate_effects": len(duplicates),
        "duplicate_operations": duplicates,
        "succeeded_without_exactly_one_effect": mismatches,
        "effects": effects,
        "effects_applied": sum(e["applied"] for e in effects.values()),
        "database": database_driver(database).describe(),
        "example_timeline": _example_timeline(database, op_ids, rows),
    }


def _example_timeline(database: Database, op_ids: list[UUID], rows: dict[UUID, StatusRow]) -> dict[str, Any]:
    # A payment whose worker was killed mid-call and which another worker retried with the same
    # key, when there is one (the demo's main story); else the most eventful payment.
    candidates = [i for i in op_ids if i in rows and rows[i].integration == "payments.charge"]
    if not candidates:
        return {}
    app = OrdersApp(env=database.library_env(create_table=False, read_only=not database_driver(database).shared))
    try:
        timelines = {i: timeline_entries(app, i) for i in candidates}
    finally:
        app.close()

    def story(op_id: UUID) -> tuple[bool, int, int]:
        recovered = any(e["details"].get("reason") == "worker_lost" for e in timelines[op_id])
        return recovered, rows[op_id].epoch, rows[op_id].attempts

    chosen = max(candidates, key=story)
    return {"operation_id": str(chosen), "events": timelines[chosen]}


def _print_summary(console: Console, summary: dict[str, Any], database: Database) -> None:
    table = Table(title="operations by status")
    table.add_column("status")
    table.add_column("count", justify="right")
    for status, count in sorted(summary["by_status"].items()):
        table.add_row(cell(status), cell(count))
    console.print(table)
    console.print(f"attempts recorded: {summary['attempts']}; effects the partner applied: "
                  f"{summary['effects_applied']} (at most one per operation)")
    if summary["ambiguous"]:
        ambiguous = Table(title="ambiguous: egress may have happened; an operator decides (opledger resolve)")
        ambiguous.add_column("operation")
        ambiguous.add_column("reason")
        ambiguous.add_column("partner applied", justify="right")
        for op_id, reason in summary["ambiguous"].items():
            ambiguous.add_row(cell(op_id), cell(reason), cell(summary["effects"][op_id]["applied"]))
        console.print(ambiguous)
    timeline = summary["example_timeline"]
    if timeline:
        events = Table(title=f"timeline of payment {timeline['operation_id']}")
        for column in ("#", "event", "details"):
            events.add_column(column)
        for entry in timeline["events"]:
            shown = {k: v for k, v in entry["details"].items() if k in _TIMELINE_FIELDS and v not in (None, "")}
            events.add_row(cell(entry["version"]), cell(entry["event"]),
                           cell(", ".join(f"{k}={v}" for k, v in shown.items())))
        console.print(events)
    _print_flow(console, summary["lro"])
    callbacks = summary["callbacks"]
    console.print(f"callbacks: {callbacks['operations']} fulfilments, serve SIGKILLed mid-callback: "
                  f"{callbacks['serve_killed_mid_callback']}, callbacks recorded {callbacks['callbacks_recorded']} "
                  f"(partner sends {callbacks['callback_sends']}), lost {callbacks['lost']}, duplicate effects "
                  f"{callbacks['duplicate_effects']}, forged accepted {callbacks['forged_accepted']} "
                  f"(answered {callbacks['forged_status']}), replayed accepted {callbacks['replayed_accepted']} "
                  f"(answered {callbacks['replayed_status']})")
    console.print(closing_line(summary, _this_command(), mask_url(database.url())))


def closing_line(summary: dict[str, Any], command: str, url: str) -> str:
    """The demo's last line (Rich markup) from its JSON ``summary``: the verdict, every flow's
    operations as ``opledger ops list`` shows them, lost and duplicated effects summed over the
    flows, and the command that lists them (``command`` is how opledger was started, ``url`` the
    store's URL with any password masked)."""
    callbacks = summary["callbacks"]
    verdict = "[bold green]OK[/]" if _clean(summary) else "[bold red]FAILED[/]"
    # summary["operations"] holds the orders' payments and notifications and the provisioning
    # flow's operations (one worker drains them together); the fulfilments are counted apart.
    total = summary["operations"] + callbacks["operations"]
    orders = summary["operations"] - summary["lro"]["operations"]
    return (f"{verdict}: {total} operations ({orders} payments and notifications, "
            f"{summary['lro']['operations']} provisioning, {callbacks['operations']} fulfilments), "
            f"lost {summary['lost'] + callbacks['lost']}, duplicate effects "
            f"{summary['duplicate_effects'] + callbacks['duplicate_effects']}, provisioning mismatches "
            f"{len(summary['lro']['mismatches'])}. Inspect with `{command} ops list --database-url {url}`.")


def _print_flow(console: Console, flow: dict[str, Any]) -> None:
    table = Table(title="provisioning (long-running operations): the ledger against the provider")
    for column in ("workspace", "ledger outcome", "provider state"):
        table.add_column(column)
    for label, outcome in flow["outcomes"].items():
        table.add_row(cell(label), cell(outcome), cell(flow["provider"][label]))
    console.print(table)
    console.print(f"create calls applied: {flow['creates_applied']} for {flow['operations']} operations; "
                  f"polls answered: {flow['polls']}; cancels received: {flow['cancel_requests']}; "
                  f"mismatches: {len(flow['mismatches'])}")
    resumed = flow["resumed_by_another_worker"]
    console.print(f"polling resumed by worker 2 after worker 1 was SIGKILLed mid-poll: {len(resumed)} of "
                  f"{flow['operations']} ({', '.join(resumed) or 'none'})")


def _this_command() -> str:
    """How to run this program again from here: ``opledger`` when that is on PATH, else the path
    it was started as (``.venv/bin/opledger`` after the README's first command, with the
    virtual environment not activated)."""
    started_as = Path(sys.argv[0])
    if shutil.which("opledger") or started_as.name != "opledger":
        return "opledger"
    return os.path.relpath(started_as)


_TIMELINE_FIELDS = ("epoch", "worker_id", "attempt_number", "status_code", "reason", "category",
                    "retry_at", "possibly_applied", "entity_version", "integration_name", "delivery_mode")
