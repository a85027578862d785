"""A store with closed operations for the archive tests: closed orders, one open, expired
receipts, and ``opledger archive`` run in process (``test_archive_run``, ``test_archive_reads``,
``test_archive_receipts``, ``test_doctor_retention``, ``tests/process/test_archive_crashes``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

from typer.testing import CliRunner

from adapters.cli.app import app as cli
from adapters.demo.orders import OrdersApp
from ledger.clock import FakeClock
from ledger.config import Database
from ledger.receipts import Envelope, Receipt
from projections.status import StatusProjection
from projections.view import StatusView
from tests.conftest import close_directly

APP_TOPIC = "adapters.demo.orders:OrdersApp"
RECEIPT_BODY = b'{"order_id": "o-1"}'
"""The body of the envelope :func:`expired_receipt` completes a receipt with."""


def closed_orders(app: OrdersApp, clock: FakeClock, view: StatusView, *, orders: int = 1,
                  fulfil: bool = False) -> tuple[list[UUID], list[UUID], UUID]:
    """``orders`` orders whose operations (payment, notification and, with ``fulfil``, fulfilment)
    are closed (settled at ``clock``'s time), then one more order whose two are left pending; the
    status view caught up.

    Returns:
        ``(closed ids, open ids, the first order's id)``.
    """
    closed: list[UUID] = []
    first: UUID | None = None
    for n in range(orders):
        order_id, placed = app.place_order(customer_email=f"c{n}@example.test", amount_cents=100,
                                           payments_url="http://p/pay", notify_url="http://p/n")
        first = first or order_id
        op_ids = [*placed, app.fulfil_order(order_id, fulfil_url="http://p/f")] if fulfil else list(placed)
        for op_id in op_ids:
            close_directly(app, op_id, clock, app.repository.get(order_id).version)
        closed += op_ids
    _, still_open = app.place_order(customer_email="open@example.test", amount_cents=200,
                                    payments_url="http://p/pay", notify_url="http://p/n")
    StatusProjection(app=app, view=view).catch_up()
    assert first is not None, "at least one order"
    return closed, list(still_open), first


def expired_receipt(app: OrdersApp, clock: FakeClock, key: str, *, expire: bool = True) -> UUID:
    """A keyed command's receipt for ``key``, completed with a 201 envelope (body
    :data:`RECEIPT_BODY`) and expired unless told not to, at ``clock``'s time; saved. Returns its id."""
    receipt = Receipt.open(principal="alice", scope="place_order", key=key, request={"body": {"n": 1}},
                           owner="serve-1", now=clock.now(), lease_seconds=30)
    receipt.complete(epoch=1, envelope=Envelope(status=201, headers=(("content-type", "application/json"),),
                                                body=RECEIPT_BODY), operation_ids=[], now=clock.now())
    if expire:
        receipt.expire(now=clock.now())
    app.save(receipt)
    return receipt.id


def archive_cli(db: Database, out: Path, *extra: str) -> dict[str, Any]:
    """``opledger archive --out OUT --before 1s --json`` on ``db`` in process (exit 0 asserted);
    returns its JSON report."""
    result = CliRunner().invoke(cli, ["archive", "--out", str(out), "--before", "1s", "--json",
                                      "--database-url", db.url(), *extra], env={"OPLEDGER_APP": APP_TOPIC})
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report
