"""Simulated providers: one model per delivery mode, each keeping its own ground truth.

The provider decides what happened to each delivery (applied or not, how many times) and then
reports it the way the network would: as the facts of an HTTP exchange, classified by the real
webhook classifier (``adapters.webhook.classify``). So the simulation checks the product's
classification and its decisions against what really happened, not against a copy of them.

Per mode: an ``idempotent`` provider dedupes on the operation id (the idempotency key) and
answers a repeat with 200; ``non_idempotent``, ``recoverable_remote_id`` and ``callback``
providers apply every delivery that reaches them (a repeat is a second charge);
``recoverable_remote_id`` also answers lookups; ``read_only`` has no effect to count.

Source: issue 11 ("simulated providers, one per delivery mode"); DESIGN §5.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from uuid import UUID

from adapters.simulation.faults import LOOKUP_FAULTS, PROVIDER_FAULTS, Fault, FaultPlan
from adapters.webhook.classify import HttpExchange, TransportFailure, classify, classify_lookup
from ledger.clock import Clock
from ledger.declarations import DeliveryMode
from ledger.egress import EgressRequest
from ledger.outcomes import Outcome

RETRY_AFTER_SECONDS = "2"


class SimProvider:
    """The provider behind every simulated integration (``ledger.egress.Adapter``).

    Args:
        faults: the run's fault plan (and random source).
        clock: the simulated clock (for ``Retry-After`` arithmetic).

    Attributes:
        applied: operation id -> times its effect was applied.
        delivered: operation id -> deliveries that reached the provider.
        rejected: operations the provider refused for good.
        faults_by_operation: operation id -> the provider faults its deliveries met.
        changes: effects applied so far, in all (a reader checks again only when it grew).
    """

    def __init__(self, *, faults: FaultPlan, clock: Clock) -> None:
        self.faults = faults
        self.clock = clock
        self.applied: Counter[UUID] = Counter()
        self.delivered: Counter[UUID] = Counter()
        self.rejected: set[UUID] = set()
        self.faults_by_operation: dict[UUID, list[Fault]] = {}
        self.changes = 0
        self.lines: list[str] = []  # one per delivery or lookup; the run moves them to its trace
        self.on_applied: Callable[[EgressRequest], None] | None = None
        """Told of every effect applied (``adapters.simulation.callbacks`` plans callbacks)."""

    def send(self, request: EgressRequest) -> Outcome:
        """Receive one delivery: apply it (or not) and answer as the network would."""
        op_id = request.operation_id
        fault = self.faults.pick(PROVIDER_FAULTS)
        if fault is not None:
            self.faults_by_operation.setdefault(op_id, []).append(fault)
        outcome = self._deliver(request, fault)
        self.lines.append(f"{op_id.hex[:8]} attempt {request.attempt_number}, {fault.value if fault else 'ok'}, "
                          f"applied {self.applied[op_id]}x -> {type(outcome).__name__}")
        return outcome

    def _deliver(self, request: EgressRequest, fault: Fault | None) -> Outcome:
        op_id, mode = request.operation_id, request.delivery_mode
        if fault is Fault.REFUSED:
            return self._classify(HttpExchange(failure=TransportFailure.CONNECT, sent=False,
                                               excerpt="connection refused"))
        self.delivered[op_id] += 1
        duplicate = mode is DeliveryMode.IDEMPOTENT and self.applied[op_id] > 0
        if duplicate and fault is not Fault.RESPONSE_LOST:
            # Dedupe on the key: the effect exists; the answer is the original success.
            return self._classify(self._ok(op_id))
        if fault is Fault.THROTTLED:
            return self._classify(HttpExchange(status_code=429, headers={"retry-after": RETRY_AFTER_SECONDS}))
        if fault is Fault.REJECTED:
            self.rejected.add(op_id)
            return self._classify(HttpExchange(status_code=422, excerpt="rejected"))
        if not duplicate:
            self.applied[op_id] += 1
            self.changes += 1
            if self.on_applied is not None:
                self.on_applied(request)
        if fault is Fault.RESPONSE_LOST:
            return self._classify(HttpExchange(failure=TransportFailure.TIMEOUT, sent=True, excerpt="read timeout"))
        if fault is Fault.APPLIED_5XX:
            return self._classify(HttpExchange(status_code=500, excerpt="internal error"))
        return self._classify(self._ok(op_id))

    def lookup(self, request: EgressRequest) -> Outcome | None:
        """Answer "did you receive operation X?": right, unknown, or failing."""
        fault = self.faults.pick(LOOKUP_FAULTS)
        self.lines.append(f"{request.operation_id.hex[:8]} lookup, {fault.value if fault else 'ok'}, "
                          f"applied {self.applied[request.operation_id]}x")
        if fault is Fault.LOOKUP_FAILING:
            return classify_lookup(HttpExchange(failure=TransportFailure.CONNECT, sent=False))
        if fault is Fault.LOOKUP_UNKNOWN:
            return classify_lookup(HttpExchange(status_code=503, excerpt="cannot tell"))
        if self.applied[request.operation_id] > 0:
            return classify_lookup(self._ok(request.operation_id))
        return classify_lookup(HttpExchange(status_code=404))

    def _ok(self, op_id: UUID) -> HttpExchange:
        body = json.dumps({"id": f"eff_{op_id.hex[:12]}"}).encode()
        return HttpExchange(status_code=200, body=body, excerpt=body.decode())

    def _classify(self, exchange: HttpExchange) -> Outcome:
        return classify(exchange, now=self.clock.now())
