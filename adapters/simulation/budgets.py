"""Call budgets in the simulator (issue 14 item 1): budgeted declarations, hierarchical, and the
budget oracle that watches every request reach the provider.

The simulated application declares a global budget; the ``idempotent`` integration its own
budget with a per-tenant budget inside it (operations alternate between two tenants); the
``recoverable_remote_id`` integration a budget its lookups count against too. The windows are
short against the run's pace, so budgets are used up and operations wait in most seeds.

:class:`BudgetWatch` stands between the workers and the provider and records each request as it
arrives (a send or a lookup, at the simulated time it reaches the provider). Its check,
``call_budget``, holds two things for every request, computed from the constants below and not
from ``ledger.budgets`` (the oracle must not share a bug with the code it checks):

- no window of any level (epoch-aligned, per scope) sees more requests than its limit;
- the request's attempt id is one the ledger recorded (an ``AttemptStarted`` of its operation,
  committed before the request arrived).

Source: issue 14 item 1 ("no window sees more requests than the budget"); issue 11 (the oracle).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ledger.clock import Clock
from ledger.declarations import DeliveryMode
from ledger.egress import EgressRequest
from ledger.operation import Operation
from ledger.outcomes import Outcome

GLOBAL_BUDGET: dict[str, Any] = {"calls_per_window": 6, "window_seconds": 2.0}
"""Every simulated integration together: 6 requests per 2 s."""
BUDGETS: dict[DeliveryMode, dict[str, Any]] = {
    DeliveryMode.IDEMPOTENT: {"calls_per_window": 3, "window_seconds": 2.0,
                              "per_tenant": {"calls_per_window": 2, "window_seconds": 1.0}},
    DeliveryMode.RECOVERABLE_REMOTE_ID: {"calls_per_window": 2, "window_seconds": 2.0},
}
"""Each budgeted integration's ``budgets`` declaration (the others have none of their own)."""
TENANTS = ("acme", "beta")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def budgets_of(mode: DeliveryMode) -> dict[str, Any]:
    """The ``budgets`` declaration of the simulated integration of ``mode`` (``{}``: none)."""
    return BUDGETS.get(mode, {})


def tenant_of(number: int) -> str:
    """The tenant of the simulation's ``number``-th operation (they alternate)."""
    return TENANTS[number % len(TENANTS)]


@dataclass(frozen=True, slots=True)
class Request:
    """One request as it reached the provider."""

    at: datetime
    kind: str
    operation_id: UUID
    attempt_id: UUID
    mode: DeliveryMode
    tenant: str


def _windows(request: Request) -> list[tuple[str, int, float, int]]:
    """``(scope, limit, seconds, window index)`` of every level ``request`` counts against."""
    levels = [("global", GLOBAL_BUDGET["calls_per_window"], GLOBAL_BUDGET["window_seconds"])]
    declared = budgets_of(request.mode)
    if declared:
        levels.append((request.mode.value, declared["calls_per_window"], declared["window_seconds"]))
        tenant = declared.get("per_tenant")
        if tenant:
            levels.append((f"{request.mode.value}|{request.tenant}", tenant["calls_per_window"],
                           tenant["window_seconds"]))
    elapsed = (request.at - _EPOCH).total_seconds()
    return [(scope, limit, seconds, math.floor(elapsed / seconds)) for scope, limit, seconds in levels]


class BudgetWatch:
    """The provider (``ledger.egress.Adapter``) with every request recorded for the budget
    oracle; anything else is the provider's own (``__getattr__``).

    Args:
        provider: the simulated provider.
        clock: the simulated clock (when a request arrives).
        app: the run's application (the attempts the ledger recorded).
    """

    def __init__(self, provider: Any, clock: Clock, app: Any) -> None:
        self.provider = provider
        self.clock = clock
        self.app = app
        self.requests: list[Request] = []
        self.per_window: Counter[tuple[str, int]] = Counter()
        self._checked = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.provider, name)

    def send(self, request: EgressRequest) -> Outcome:
        """Record the delivery, then hand it to the provider."""
        self._record(request, "send")
        outcome: Outcome = self.provider.send(request)
        return outcome

    def lookup(self, request: EgressRequest) -> Outcome | None:
        """Record the lookup, then hand it to the provider."""
        self._record(request, "lookup")
        found: Outcome | None = self.provider.lookup(request)
        return found

    def _record(self, request: EgressRequest, kind: str) -> None:
        self.requests.append(Request(self.clock.now(), kind, request.operation_id, request.attempt_id,
                                     DeliveryMode(request.delivery_mode), request.tenant))

    def check(self) -> tuple[str, UUID, str] | None:
        """Check the requests that arrived since the last check.

        Returns:
            ``(invariant, operation id, detail)`` of the first broken rule, or None.
        """
        while self._checked < len(self.requests):
            request = self.requests[self._checked]
            self._checked += 1
            recorded = {e.attempt_id for e in self.app.events.get(request.operation_id)
                        if isinstance(e, Operation.AttemptStarted) and e.timestamp <= request.at}
            if request.attempt_id not in recorded:
                return ("call_budget", request.operation_id,
                        f"a {request.kind} reached the provider with attempt {request.attempt_id}, which the ledger "
                        "did not record before it")
            for scope, limit, seconds, index in _windows(request):
                self.per_window[(scope, index)] += 1
                if self.per_window[(scope, index)] > limit:
                    return ("call_budget", request.operation_id,
                            f"budget {scope}: {self.per_window[(scope, index)]} requests in the {seconds:g} s window "
                            f"from {index * seconds:g} s, over its {limit}")
        return None
