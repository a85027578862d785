"""The originating principal and trace travel into settlement (issue: executors, item 6)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

from ledger.declarations import Integration
from ledger.identity import Source
from ledger.operation import Operation
from ledger.settlement import SettlementOutcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_principal_and_trace_reach_the_entity_action_and_the_settled_fact() -> None:
    integration = Integration.parse({
        "name": "payments.charge", "version": 1, "adapter": "fake", "delivery_mode": "idempotent",
        "settlement": {"entity_type": "m:Order", "method": "on_payment"}, "payload": {"n": "public"}})
    op = Operation.intend(now=NOW, integration=integration, payload={"n": 1}, principal="alice",
                          traceparent=TRACE, source=Source("t", "m:Order", uuid4(), 1))
    epoch = op.claim(now=NOW, worker_id="w", lease_seconds=30)
    op.start_attempt(epoch=epoch, now=NOW, attempt_id=uuid4(), request_fingerprint="f")
    op.succeed(epoch=epoch, now=NOW, attempt_id=op.last_attempt_id, remote_id="ch_1")
    outcome = SettlementOutcome.of(op)
    assert (outcome.principal, outcome.traceparent, outcome.result, outcome.remote_id) == (
        "alice", TRACE, "succeeded", "ch_1")
    op.settle(now=NOW, entity_version=2)
    settled = op.pending_events[-1]
    assert isinstance(settled, Operation.Settled)
    assert (settled.principal, settled.traceparent) == ("alice", TRACE)
