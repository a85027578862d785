"""Call budgets in the due-work pass (issue 14 item 1): a send takes a call from its budget's
current window in the same ``save()`` as its claim and ``AttemptStarted``, or the operation
records ``BudgetWaited`` and is due when the next window opens.

The window is a ``ledger.budgets.CallWindow`` aggregate loaded fresh each time the change runs
(the committer re-runs changes after a version conflict), so a worker that lost a race for a
window's last call sees it full on the retry. The changes of one batch share one instance of a
window, so a batch never conflicts with itself over it. The last tenth of a window (at most
1 s) starts no call, and a call still waiting for egress when its window ends is not made
(``InFlight.send_by``: it fails as not sent and is retried), so a call reaches the provider inside
the window it was counted in.

Source: issue 14 item 1; DESIGN §7; ledger/budgets.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate

from executors.commit import Change
from ledger.application import LedgerApplication
from ledger.budgets import CallWindow, budget_scope, window_bounds, window_id
from ledger.declarations import Integration
from ledger.errors import IllegalTransitionError
from ledger.operation import Operation
from ledger.status import ExecutionState as E

GUARD_FRACTION = 0.1
"""The last tenth of each window starts no call (at most ``MAX_GUARD_SECONDS``)."""
MAX_GUARD_SECONDS = 1.0
"""Upper bound of that guard, seconds. A call started just before a window ends reaches the
provider after it (the worker's pass and the request take time): without the guard the provider
saw 11 requests in a 2 s window of a 10-per-window budget (tests/process)."""


@dataclass(frozen=True, slots=True)
class Budget:
    """The window a send at ``now`` would take its call from.

    Attributes:
        scope: the budget key (``ledger.budgets.budget_scope``).
        window: the window's key in the pass (scope and start), for one call per window per pass.
        start, end: the window, UTC.
        closes_at: after this no call of the window starts (the guard before ``end``).
        limit: calls per window.
    """

    scope: str
    window: str
    start: datetime
    end: datetime
    closes_at: datetime
    limit: int


class _Plan(Protocol):
    calls: dict[Any, Any]


def budget_of(declaration: Integration, tenant: str, now: datetime) -> Budget | None:
    """The budget and window of a send at ``now``, or None when the declaration has none. Pure."""
    scope = budget_scope(declaration, tenant)
    limit = declaration.budgets.calls_per_window
    if scope is None or limit is None:
        return None
    seconds = declaration.budgets.window_seconds
    start, end = window_bounds(now, seconds)
    closes_at = end - timedelta(seconds=min(seconds * GUARD_FRACTION, MAX_GUARD_SECONDS))
    return Budget(scope=scope, window=f"budget:{scope}:{start.isoformat()}", start=start, end=end,
                  closes_at=closes_at, limit=limit)


def budgeted(app: LedgerApplication, budget: Budget, claim: Change, plan: _Plan, now: datetime,
             windows: dict[str, CallWindow]) -> Change:
    """Wrap a claim change: take a call from ``budget``'s window with the attempt, or record
    ``BudgetWaited`` (a pending operation) instead of claiming when the window is full.

    ``windows`` is the pass's: the changes of one batch share one window instance, so a worker
    takes as many calls of a window in one commit as it has left.
    """

    def change(op: Operation) -> Sequence[Aggregate]:
        # A call an earlier run of this change planned (before a conflict) is not this run's.
        plan.calls.pop(op.id, None)
        window = windows.get(budget.window)
        if window is None or not window.pending_events:
            # First use in this commit attempt: a saved instance, or one whose save failed (the
            # library then drops its pending events; its version ran ahead), is loaded again.
            window = windows[budget.window] = _load_window(app, budget)
        if window.left <= 0 or now >= budget.closes_at:
            if op.execution is E.PENDING:
                op.wait_for_budget(now=now, scope=budget.scope, until=budget.end)
                return []
            raise IllegalTransitionError("claim", op.execution.value, f"call budget {budget.scope} is used up")
        others = claim(op)
        if op.id not in plan.calls:  # no attempt started (recovered, cancelled, exhausted): no call
            return others
        window.take(op.id)
        plan.calls[op.id].send_by = budget.end
        return [window, *others]

    return change


def _load_window(app: LedgerApplication, budget: Budget) -> CallWindow:
    try:
        window: CallWindow = app.repository.get(window_id(budget.scope, budget.start))
    except AggregateNotFoundError:
        return CallWindow.open(scope=budget.scope, start=budget.start, end=budget.end, limit=budget.limit)
    return window
