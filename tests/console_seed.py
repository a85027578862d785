"""Two more operations for the console tests, beside ``tests.observe_seed``'s scripted run (kept
apart so that run's expected counters stay as they are), driven through the aggregate's own
commands with the desk's fake clock:

- ``callback``: a payment in a W3C trace, throttled once and retried, accepted by the provider,
  a progress callback, then the provider's ``succeeded`` callback, and settled;
- ``late``: a payment that succeeded and settled, then a callback saying it failed: a late
  observation on the attention queue, for an operator to acknowledge.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from uuid import UUID, uuid4

from adapters.demo.orders import OrdersApp
from ledger.clock import FakeClock
from ledger.operation import Operation

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
"""The trace the ``callback`` case's order is placed in."""


def seed_callbacks(app: OrdersApp, clock: FakeClock) -> dict[str, UUID]:
    """Place two orders and drive their payments (see the module docstring).

    Returns:
        ``{"callback": operation id, "late": operation id}``.
    """
    _, (callback, _n1) = app.place_order(customer_email="cb@example.test", amount_cents=4200,
                                         payments_url="http://p/pay", notify_url="http://p/n", traceparent=TRACEPARENT)
    _, (late, _n2) = app.place_order(customer_email="late@example.test", amount_cents=990,
                                     payments_url="http://p/pay", notify_url="http://p/n")

    def step(op_id: UUID, seconds: float, action: Callable[[Operation], object]) -> None:
        clock.advance(seconds)
        op = app.get_operation(op_id)
        action(op)
        app.save(op)

    now = clock.now

    def claim_and_start(op: Operation) -> None:
        epoch = op.claim(now=now(), worker_id="w1", lease_seconds=30)
        op.start_attempt(epoch=epoch, now=now(), attempt_id=uuid4(), request_fingerprint="f")

    def accept(op: Operation) -> None:
        op.accept(epoch=op.epoch, now=now(), attempt_id=op.last_attempt_id, remote_id="pay_7781",
                  status_code=202, follow="callback", follow_until=now() + timedelta(hours=1))

    step(callback, 2, claim_and_start)
    step(callback, 1.5, lambda op: op.schedule_retry(epoch=op.epoch, now=now(), attempt_id=op.last_attempt_id,
                                                     retry_at=now() + timedelta(seconds=4), category="throttled",
                                                     reason="503 Retry-After: 4", possibly_applied=False))
    step(callback, 4, claim_and_start)
    step(callback, 0.8, accept)
    step(callback, 20, lambda op: op.receive_callback(now=now(), callback_id="msg_1", outcome="progress",
                                                      remote_status="authorizing"))
    step(callback, 25, lambda op: op.receive_callback(now=now(), callback_id="msg_2", outcome="succeeded",
                                                      remote_status="captured"))
    step(callback, 1, lambda op: op.settle(now=now(), entity_version=2))

    step(late, 1, claim_and_start)
    step(late, 2, lambda op: op.succeed(epoch=op.epoch, now=now(), attempt_id=op.last_attempt_id))
    step(late, 1, lambda op: op.settle(now=now(), entity_version=2))
    step(late, 30, lambda op: op.receive_callback(now=now(), callback_id="msg_9", outcome="failed",
                                                  remote_status="reversed", detail="chargeback"))
    return {"callback": callback, "late": late}


def more_work(app: OrdersApp, clock: FakeClock, *, placed: int, finish: list[UUID]) -> list[UUID]:
    """Advance the clock a minute, place ``placed`` more orders, and run the payments ``finish``
    names to an outcome (every fourth is cancelled): what the metrics page sees change between
    two samples.

    Args:
        app: the desk's application.
        clock: its fake clock (advanced 60 s, and a second per payment finished).
        placed: orders to place (two pending operations each).
        finish: pending payments (from an earlier call) to finish.

    Returns:
        The payments of the orders placed now, pending.
    """
    clock.advance(60)
    payments = []
    for i in range(placed):
        _, (pay, _note) = app.place_order(customer_email=f"more{i}@example.test", amount_cents=500 + i,
                                          payments_url="http://p/pay", notify_url="http://p/n")
        payments.append(pay)
    for n, op_id in enumerate(finish):
        clock.advance(1)
        op = app.get_operation(op_id)
        if n % 4 == 3:  # cancelled before a worker took it (no new failure: other tests count those)
            op.request_cancel(now=clock.now(), principal="otto", reason="customer left")
            op.cancel(now=clock.now(), reason="customer left")
        else:
            epoch = op.claim(now=clock.now(), worker_id="w2", lease_seconds=30)
            op.start_attempt(epoch=epoch, now=clock.now(), attempt_id=uuid4(), request_fingerprint="f")
            op.succeed(epoch=epoch, now=clock.now(), attempt_id=op.last_attempt_id)
        app.save(op)
    return payments
