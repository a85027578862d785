"""A scripted run over the demo ``OrdersApp`` for the metrics, API and console tests: one
operation per case, driven through the ledger's own commands with a fake clock.

Cases (``payments.charge`` is idempotent, ``notifications.send`` non-idempotent):

- ``success``: claimed 2 s after its intent, attempt of 3 s, succeeded, settled 1 s later;
- ``failure``: rejected (not retryable), one settlement failure, then settled;
- ``retry``: a throttled attempt retried, then succeeded;
- ``ambiguous``: a notification whose attempt timed out (waits for an operator);
- ``takeover``: a lease that expired and was taken over, then succeeded;
- ``budget``: a notification whose three attempts were refused: attempts exhausted (failed);
- ``cancel_failed``: accepted by the provider, cancel requested, the provider refused;
- ``blocked``: a notification that succeeded but whose settlement kept failing (blocked);
- ``pending``: intended and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate, event
from pydantic import BaseModel, Field

from adapters.demo.orders import NOTIFICATIONS, PAYMENTS, OrdersApp
from ledger.clock import FakeClock
from ledger.declarations import Integration
from ledger.inbound import CommandContext, Reply, command
from ledger.operation import Operation
from ledger.settlement import SettlementOutcome

CANARY_INTERNAL = "CANARY-internal-7731"
"""An ``internal`` payload value that must never leave the store in a response, page or file."""
CANARY_SECRET = "secretref:CANARY-secret-4242"
"""A ``secret`` payload field's value (a reference) that must never be shown either."""

REFUNDS = Integration.parse({
    "name": "refunds.issue", "version": 1, "adapter": "webhook", "delivery_mode": "non_idempotent",
    "requires_approval": True,
    "settlement": {"entity_type": "tests.observe_seed:Refund", "method": "on_result"},
    "payload": {"amount_cents": "public", "note": "internal", "iban": "secret"},
})


class Refund(Aggregate):
    """A refund request: its operation needs an approver."""

    @event("Requested")
    def __init__(self, amount_cents: int) -> None:
        self.amount_cents = amount_cents
        self.result: str | None = None

    def on_result(self, outcome: SettlementOutcome) -> None:
        self._settled(outcome.result)

    @event("Settled")
    def _settled(self, result: str) -> None:
        self.result = result


class RefundRequest(BaseModel):
    """The ``request_refund`` command's body."""

    amount_cents: int = Field(ge=1, le=10**9)
    note: str = Field(default="", max_length=200)


class DeskApp(OrdersApp):
    """The demo's orders with refunds that need approval (the operator's desk tests)."""

    name = "desk"
    integrations = [PAYMENTS, NOTIFICATIONS, REFUNDS]

    def request_refund(self, amount_cents: int, tenant: str = "acme") -> UUID:
        """Create a refund and its operation (awaiting approval); returns the operation id."""
        refund = Refund(amount_cents=amount_cents)
        op = self.intend(refund, "refunds.issue", target="http://p/refund", tenant=tenant,
                         payload={"amount_cents": amount_cents, "note": CANARY_INTERNAL, "iban": CANARY_SECRET},
                         traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        self.save(refund, op)
        return op.id

    @command("request_refund", request=RefundRequest, summary="Request a refund (it awaits an approver)")
    def request_refund_command(self, ctx: CommandContext, request: RefundRequest) -> Reply:
        """The same as :meth:`request_refund`, as an inbound command (issue 15)."""
        refund = Refund(amount_cents=request.amount_cents)
        op = self.intend(refund, "refunds.issue", target="http://p/refund", principal=ctx.principal, now=ctx.now,
                         payload={"amount_cents": request.amount_cents, "note": request.note, "iban": CANARY_SECRET})
        ctx.stage(refund, op)
        return Reply(201, body={"refund_id": str(refund.id), "operation_id": str(op.id)},
                     headers={"Location": f"/v1/operations/{op.id}", "ETag": f'"{refund.version}"'})

EXPECTED_COUNTERS: dict[tuple[str, str, str], float] = {
    # (name, integration, detail): the total over tenants and modes after ``seed``
    ("opledger_operations_intended", "payments.charge", ""): 8,
    ("opledger_operations_intended", "notifications.send", ""): 8,
    ("opledger_attempts", "payments.charge", ""): 5,  # success, failure, retry x2, takeover
    ("opledger_attempts", "notifications.send", ""): 6,  # ambiguous, budget x3, cancel_failed, blocked
    ("opledger_outcomes", "payments.charge", "succeeded"): 3,
    ("opledger_outcomes", "payments.charge", "failed"): 1,
    ("opledger_outcomes", "notifications.send", "ambiguous"): 1,
    ("opledger_outcomes", "notifications.send", "failed"): 1,
    ("opledger_outcomes", "notifications.send", "succeeded"): 1,
    ("opledger_settlements_blocked", "notifications.send", ""): 1,
    ("opledger_attention_entries", "notifications.send", "settlement_blocked"): 1,
    ("opledger_retries", "payments.charge", "throttled"): 1,
    ("opledger_retries", "notifications.send", "rejected"): 2,
    ("opledger_ambiguous", "notifications.send", "timeout"): 1,
    ("opledger_lease_takeovers", "payments.charge", ""): 1,
    ("opledger_cancel_failures", "notifications.send", ""): 1,
    ("opledger_budget_exhausted", "notifications.send", ""): 1,
    ("opledger_settlement_failures", "payments.charge", ""): 1,
    ("opledger_settled", "payments.charge", ""): 2,
    ("opledger_attention_entries", "notifications.send", "ambiguous"): 1,
    ("opledger_attention_entries", "notifications.send", "cancel_failed"): 1,  # CancelFailed is an attention reason (issue 12)
}


def seed(app: OrdersApp, clock: FakeClock) -> dict[str, UUID]:
    """Place eight orders and drive one payment or notification of each through a case.

    Returns:
        The driven operation ids by case name (see the module docstring).
    """
    ops: list[tuple[UUID, UUID]] = []
    orders: list[UUID] = []
    for i in range(8):
        order_id, (pay, note) = app.place_order(customer_email=f"c{i}@example.test", amount_cents=100 + i,
                                                payments_url="http://p/pay", notify_url="http://p/n")
        ops.append((pay, note))
        orders.append(order_id)
    ids = {"success": ops[0][0], "failure": ops[1][0], "retry": ops[2][0], "ambiguous": ops[3][1],
           "takeover": ops[4][0], "budget": ops[5][1], "cancel_failed": ops[6][1], "pending": ops[7][0],
           "blocked": ops[7][1]}

    def step(name: str, seconds: float, action: Callable[[Operation], object]) -> None:
        clock.advance(seconds)
        op = app.get_operation(ids[name])
        action(op)
        app.save(op)

    now = clock.now
    attempt = uuid4

    def claim_and_start(op: Operation) -> None:
        epoch = op.claim(now=now(), worker_id="w1", lease_seconds=30)
        op.start_attempt(epoch=epoch, now=now(), attempt_id=attempt(), request_fingerprint="f")

    step("success", 2, lambda op: op.claim(now=now(), worker_id="w1", lease_seconds=30))
    step("success", 0, lambda op: op.start_attempt(epoch=op.epoch, now=now(), attempt_id=attempt(),
                                                   request_fingerprint="f"))
    step("success", 3, lambda op: op.succeed(epoch=op.epoch, now=now(), attempt_id=op.last_attempt_id))
    step("success", 1, lambda op: op.settle(now=now(), entity_version=2))

    step("failure", 0, claim_and_start)
    step("failure", 0, lambda op: op.fail(epoch=op.epoch, now=now(), category="rejected", retryable=False,
                                          attempt_id=op.last_attempt_id, status_code=422))
    step("failure", 0, lambda op: op.fail_settlement(now=now(), error="entity busy", retry_at=now()))
    clock.advance(0)
    order, failed = app.repository.get(orders[1]), app.get_operation(ids["failure"])
    order._payment_settled(str(failed.id), "failed")  # the settlement action's event, as a worker saves it
    failed.settle(now=now(), entity_version=order.version)
    app.save(order, failed)

    step("retry", 0, claim_and_start)
    step("retry", 0, lambda op: op.schedule_retry(epoch=op.epoch, now=now(), attempt_id=op.last_attempt_id,
                                                  retry_at=now(), category="throttled", reason="503",
                                                  possibly_applied=False))
    step("retry", 0, claim_and_start)
    step("retry", 0, lambda op: op.succeed(epoch=op.epoch, now=now(), attempt_id=op.last_attempt_id))

    step("ambiguous", 0, claim_and_start)
    step("ambiguous", 0, lambda op: op.mark_ambiguous(epoch=op.epoch, now=now(), reason="timeout",
                                                      attempt_id=op.last_attempt_id, detail="read timeout"))

    step("takeover", 0, lambda op: op.claim(now=now(), worker_id="w1", lease_seconds=30))
    step("takeover", 31, claim_and_start)  # w1's lease ran out: w2 takes over (as w1 here)
    step("takeover", 0, lambda op: op.succeed(epoch=op.epoch, now=now(), attempt_id=op.last_attempt_id))

    for _ in range(2):
        step("budget", 0, claim_and_start)
        step("budget", 0, lambda op: op.schedule_retry(
            epoch=op.epoch, now=now(), attempt_id=op.last_attempt_id, retry_at=now(), category="rejected",
            reason="409", possibly_applied=False))
    step("budget", 0, claim_and_start)
    step("budget", 0, lambda op: op.exhaust_budget(epoch=op.epoch, now=now(), last_attempt_possibly_applied=False))

    step("cancel_failed", 0, claim_and_start)
    step("cancel_failed", 0, lambda op: op.accept(epoch=op.epoch, now=now(), attempt_id=op.last_attempt_id,
                                                  remote_id="r-1"))
    step("cancel_failed", 0, lambda op: op.request_cancel(now=now(), principal="ops", reason="customer left"))
    step("cancel_failed", 0, lambda op: op.cancel_failed(epoch=op.epoch, now=now(), reason="already shipped"))

    step("blocked", 0, claim_and_start)
    step("blocked", 0, lambda op: op.succeed(epoch=op.epoch, now=now(), attempt_id=op.last_attempt_id))
    step("blocked", 0, lambda op: op.block_settlement(now=now(), reason="the order was archived"))
    return ids
