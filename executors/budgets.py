"""Call budgets in the executors (issue 14 item 1): a request to the provider (a send, or the
lookup of a ``recoverable_remote_id`` attempt) takes one call from the current window of every
budget level that applies, in the same ``save()`` as the fact it goes with, or none; when any
level has none left the operation waits for that level's next window.

Levels (``ledger.budgets.budget_levels``): the application's global budget, the integration's,
and each tenant's inside it. Their windows are ``ledger.budgets.CallWindow`` aggregates, loaded
fresh each time a change runs (the committer re-runs changes after a version conflict), so a
worker that lost a race for any level's last call sees it full on the retry; the changes of one
batch share one instance of each window, so a batch never conflicts with itself over one.
Windows are always taken and listed outermost first; on PostgreSQL every event insert also takes
the events table's lock first (the library's, for notification order), so two workers' commits
over the same windows serialize instead of deadlocking, and a conflict only ever follows another
worker's successful commit (progress, no livelock).

A call must leave by its send-by instant, a safety margin before the first of its windows ends
(``send_margin``: the smaller of 0.25 s and a quarter of the window), so that a call counted in a
window reaches the provider inside it on a loaded machine; a call still waiting for egress then
is not made (``InFlight.send_by``). No call starts in the last tenth of a window (at most 1 s)
before that send-by instant.

Source: issue 14 item 1; DESIGN §7; ledger/budgets.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate

from executors.commit import Change
from ledger.application import LedgerApplication
from ledger.budgets import BudgetLevel, CallWindow, LevelWindow, budget_levels, limiting_level, window_bounds, window_id
from ledger.decisions import claim_makes_call
from ledger.declarations import CallBudget, Integration
from ledger.errors import UnknownIntegrationError
from ledger.operation import Operation
from ledger.transition_errors import CallBudgetUsedUpError

SEND_MARGIN_SECONDS = 0.25
"""A call counted in a window leaves at least this long before the window ends (at most
``SEND_MARGIN_FRACTION`` of the window), seconds: the time the request may take to reach the
provider on a loaded machine. Without it the provider saw 8 requests in a 2 s window of a
4-per-window budget: calls checked just before the window ended arrived ~100 ms after it
(fresh-clone tryout B5)."""
SEND_MARGIN_FRACTION = 0.25
"""Upper bound of the send margin, as a fraction of the window."""
GUARD_FRACTION = 0.1
"""The last tenth of each window before its send-by instant starts no call (at most
``MAX_GUARD_SECONDS``)."""
MAX_GUARD_SECONDS = 1.0
"""Upper bound of that guard, seconds. A call started just before a window ends reaches the
provider after it (the worker's pass and the request take time): without the guard the provider
saw 11 requests in a 2 s window of a 10-per-window budget (tests/process)."""


@dataclass(frozen=True, slots=True)
class LevelSlot:
    """One level's window a call at some instant would take from.

    Attributes:
        level: the budget (``ledger.budgets.BudgetLevel``).
        start, end: the window, UTC.
        closes_at: after this no call of the window starts (the guard before ``send_by``).
        send_by: a call counted in the window and not made by then is not made
            (:func:`send_margin` before ``end``).
    """

    level: BudgetLevel
    start: datetime
    end: datetime
    closes_at: datetime
    send_by: datetime

    @property
    def key(self) -> str:
        """The window's key in a pass (scope and start): one instance per window per pass."""
        return f"budget:{self.level.scope}:{self.start.isoformat()}"


@dataclass(frozen=True, slots=True)
class Budget:
    """The windows a call at one instant takes from, outermost level first."""

    slots: tuple[LevelSlot, ...]

    @property
    def send_by(self) -> datetime:
        """The first of the windows' send-by instants (each :func:`send_margin` before its
        window's end): a call not made by then is not made."""
        return min(slot.send_by for slot in self.slots)


def send_margin(window_seconds: float) -> float:
    """How long before a window ends a call counted in it must leave, seconds: the smaller of
    ``SEND_MARGIN_SECONDS`` and ``SEND_MARGIN_FRACTION`` of the window. Pure."""
    return min(SEND_MARGIN_SECONDS, window_seconds * SEND_MARGIN_FRACTION)


class _Plan(Protocol):
    calls: dict[Any, Any]


def budget_of(declaration: Integration, tenant: str, now: datetime,
              global_budget: CallBudget | None = None) -> Budget | None:
    """The windows a call at ``now`` for ``tenant`` of ``declaration`` takes from, or None when
    no budget applies. Pure."""
    slots = []
    for level in budget_levels(declaration, tenant, global_budget):
        start, end = window_bounds(now, level.window_seconds)
        send_by = end - timedelta(seconds=send_margin(level.window_seconds))
        guard = min(level.window_seconds * GUARD_FRACTION, MAX_GUARD_SECONDS)
        slots.append(LevelSlot(level, start, end, send_by - timedelta(seconds=guard), send_by))
    return Budget(tuple(slots)) if slots else None


def claim_budget(app: LedgerApplication, op: Operation, now: datetime) -> Budget | None:
    """The call budgets a claim of ``op`` at ``now`` may make a call against, or None (no
    budget applies, or the claim makes no call: only a send, or the lookup a reclaim of a
    ``look_up`` mode may make, is a call). Ask it of the operation the claim change sees."""
    if not claim_makes_call(op):  # ledger.decisions.claim_plan: a send, or a look_up mode's lookup
        return None
    try:
        declaration = app.registry.get(op.integration_name, op.integration_version)
    except UnknownIntegrationError:
        return None  # the claim change defers it
    return budget_of(declaration, op.tenant, now, app.global_budget)


def take_calls(app: LedgerApplication, budget: Budget, op_id: UUID, now: datetime,
               windows: dict[str, CallWindow], kind: str = "send") -> list[CallWindow] | LevelWindow:
    """Take one call for ``op_id`` from every level's window, or none.

    Args:
        app: where the windows are stored.
        budget: from :func:`budget_of`.
        op_id: the operation the call is for.
        now: UTC-aware instant.
        windows: the pass's window instances by key (shared by the changes of one batch).
        kind: ``"send"`` or ``"lookup"`` (recorded on ``CallTaken``).

    Returns:
        The windows to save with the call's fact, outermost first; or, when some level has no
        call left, the limiting level's window (``ledger.budgets.limiting_level``) and nothing
        is taken.
    """
    loaded, limiting = _limiting(app, budget, now, windows)
    if limiting is not None:
        return limiting
    for window in loaded:
        window.take(op_id, kind)
    return loaded


def check_calls(app: LedgerApplication, budget: Budget, now: datetime,
                windows: dict[str, CallWindow]) -> LevelWindow | None:
    """The limiting level's window if a call at ``now`` would not fit, else None; takes nothing."""
    return _limiting(app, budget, now, windows)[1]


def _limiting(app: LedgerApplication, budget: Budget, now: datetime,
              windows: dict[str, CallWindow]) -> tuple[list[CallWindow], LevelWindow | None]:
    """Every level's window (loaded or this pass's) and the limiting one at ``now``, if any."""
    loaded = [_window(app, slot, windows) for slot in budget.slots]
    seen = [LevelWindow(slot.level, slot.start, slot.end, slot.closes_at, window.left)
            for slot, window in zip(budget.slots, loaded, strict=True)]
    return loaded, limiting_level(seen, now)


def budgeted(app: LedgerApplication, claim: Change, plan: _Plan, now: datetime,
             windows: dict[str, CallWindow]) -> Change:
    """Wrap a claim change so that a call it plans takes a call from every level of the
    operation's budget (:func:`claim_budget`). It is asked inside the change, of the operation as
    this run of the change sees it: a decision taken before, on a stale copy (the worker's
    memory, or a run before a version conflict), could let a send through unbudgeted (found by
    the simulator: an operation known as ``dispatching`` was pending again when committed).

    Checked before claiming: when a level has no call left, the operation records
    ``BudgetWaited`` (naming the limiting level's scope, due when its window ends) instead of
    being claimed. A pending operation so; a reclaim too (an expired lease: a new attempt, or the
    lookup of an open one), unleased: it takes no lease it could not use, counts no takeover, and
    leaves the lapsed holder's epoch, so that holder's late outcome can still be recorded
    (docs/adr/0001-operation-lifecycle.md, ``wait_for_budget``).

    ``windows`` is the pass's: the changes of one batch share one window instance, so a worker
    takes as many calls of a window in one commit as it has left.
    """

    def change(op: Operation) -> Sequence[Aggregate]:
        # A call an earlier run of this change planned (before a conflict) is not this run's.
        plan.calls.pop(op.id, None)
        budget = claim_budget(app, op, now)
        if budget is None:
            return claim(op)
        limiting = check_calls(app, budget, now, windows)
        if limiting is not None:
            op.wait_for_budget(now=now, scope=limiting.level.scope, until=limiting.end)
            return []
        others = claim(op)
        call = plan.calls.get(op.id)
        if call is None:  # no call planned (cancelled, exhausted, decided without a lookup)
            return others
        taken = take_calls(app, budget, op.id, now, windows, call.kind)
        if isinstance(taken, LevelWindow):  # not after check_calls in this run; never sent unbudgeted
            plan.calls.pop(op.id, None)
            raise CallBudgetUsedUpError("claim", op.execution.value,
                                         f"call budget {taken.level.scope} is used up until {taken.end.isoformat()}")
        call.send_by = budget.send_by
        return [*taken, *others]

    return change


def _window(app: LedgerApplication, slot: LevelSlot, windows: dict[str, CallWindow]) -> CallWindow:
    window = windows.get(slot.key)
    if window is None or not window.pending_events:
        # First use in this commit attempt: a saved instance, or one whose save failed (the
        # library then drops its pending events; its version ran ahead), is loaded again.
        window = windows[slot.key] = _load_window(app, slot)
    return window


def _load_window(app: LedgerApplication, slot: LevelSlot) -> CallWindow:
    try:
        window: CallWindow = app.repository.get(window_id(slot.level.scope, slot.start))
    except AggregateNotFoundError:
        return CallWindow.open(scope=slot.level.scope, start=slot.start, end=slot.end, limit=slot.level.limit)
    return window
