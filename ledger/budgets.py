"""Call budgets enforced before egress, across workers (issue 14 item 1).

A declaration's ``budgets`` (``calls_per_window``, ``window_seconds``, ``scope``) limit how many
attempts may start per window: for the whole integration, or per tenant. Windows are aligned to
the Unix epoch (``[k * window, (k + 1) * window)``, UTC). Each window of each scope is a small
event-sourced aggregate, :class:`CallWindow`, whose ``CallTaken`` events are the calls it gave
out; the due-work pass saves the window with the claim and its ``AttemptStarted`` in **one**
``save()``, so a call is counted exactly when its attempt is recorded, and two workers taking
the same window's last call conflict on the window's version: one commit wins, the other
reloads and sees the window full. When a window is full, the operation records
``BudgetWaited`` and is due again when the next window opens; it is not failed.

Budgets are hierarchical (:func:`budget_levels`): the application's global budget, the
integration's, and each tenant's inside it. A call takes one call from the current window of
every level that applies, all in that one ``save()``, or none; when any level has none left the
operation waits for the window of the level that limits it (:func:`limiting_level`).

Source: issue 14 item 1; DESIGN §7 ("budgets ... checked before egress, never after").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate

from ledger.codec import LedgerEvent
from ledger.declarations import CallBudget, Integration

__all__ = ["GLOBAL_SCOPE", "BudgetLevel", "CallWindow", "Level", "LevelWindow", "budget_levels", "budget_scope",
           "limiting_level", "scope_labels", "scope_level", "window_bounds", "window_id"]

GLOBAL_SCOPE = "(global)"
"""The scope key of the application's global call budget: no declared name can equal it
(``ledger.declarations.NAME_PATTERN`` has no parentheses)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def budget_scope(integration: Integration, tenant: str) -> str | None:
    """The key of ``integration``'s own budget (``budgets.calls_per_window``) for ``tenant``:
    the integration's name, or with ``scope: tenant`` one per tenant; None when the declaration
    has none. Pure."""
    budgets = integration.budgets
    if budgets.calls_per_window is None:
        return None
    if budgets.scope == "tenant":
        return f"{integration.name}|tenant={tenant}"
    return integration.name


class Level(StrEnum):
    """Where a call budget sits; a call must fit every level that applies."""

    GLOBAL = "global"
    """The application's: every call of every integration (``LedgerApplication.global_call_budget``)."""
    INTEGRATION = "integration"
    """One integration's, every tenant together (``budgets.calls_per_window``)."""
    TENANT = "tenant"
    """One tenant's of one integration (``budgets.per_tenant``, or ``scope: tenant``)."""


@dataclass(frozen=True, slots=True)
class BudgetLevel:
    """One budget a call counts against.

    Attributes:
        level: where it sits.
        scope: the key its windows are found by (:func:`budget_scope` for an integration's).
        limit: calls per window.
        window_seconds: the window's length, seconds.
    """

    level: Level
    scope: str
    limit: int
    window_seconds: float


def budget_levels(integration: Integration, tenant: str, global_budget: CallBudget | None = None
                  ) -> tuple[BudgetLevel, ...]:
    """Every call budget a call of ``integration`` for ``tenant`` counts against, outermost
    first: global, integration, tenant. Windows are always taken in this order. Pure.

    Args:
        integration: the operation's declaration (its ``budgets``).
        tenant: the operation's tenant.
        global_budget: the application's global budget, if it declares one.

    Returns:
        The levels that apply (empty: no call budget).
    """
    levels: list[BudgetLevel] = []
    if global_budget is not None:
        levels.append(BudgetLevel(Level.GLOBAL, GLOBAL_SCOPE, global_budget.calls_per_window,
                                  global_budget.window_seconds))
    budgets = integration.budgets
    scope = budget_scope(integration, tenant)
    if scope is not None and budgets.calls_per_window is not None:
        level = Level.TENANT if budgets.scope == "tenant" else Level.INTEGRATION
        levels.append(BudgetLevel(level, scope, budgets.calls_per_window, budgets.window_seconds))
    if budgets.per_tenant is not None:
        levels.append(BudgetLevel(Level.TENANT, f"{integration.name}|tenant={tenant}",
                                  budgets.per_tenant.calls_per_window, budgets.per_tenant.window_seconds))
    return tuple(levels)


def scope_level(scope: str) -> Level:
    """The level of a budget scope key. Pure."""
    if scope == GLOBAL_SCOPE:
        return Level.GLOBAL
    return Level.TENANT if "|tenant=" in scope else Level.INTEGRATION


def scope_labels(scope: str) -> tuple[str, str]:
    """``(integration, tenant)`` of a budget scope key, ``""`` where the level has none (the
    global budget has neither; an integration's has no tenant). Pure."""
    if scope == GLOBAL_SCOPE:
        return "", ""
    integration, _, tenant = scope.partition("|tenant=")
    return integration, tenant


@dataclass(frozen=True, slots=True)
class LevelWindow:
    """One level's current window, as a call at some instant would see it.

    Attributes:
        level: the budget.
        start, end: the window, UTC.
        closes_at: after this no call of the window starts (a guard before ``end``).
        left: calls still available in it.
    """

    level: BudgetLevel
    start: datetime
    end: datetime
    closes_at: datetime
    left: int


def limiting_level(windows: Sequence[LevelWindow], now: datetime) -> LevelWindow | None:
    """The level that stops a call at ``now``, or None when every level has a call left.

    A level stops the call when its window has no call left or ``now`` is past its
    ``closes_at``. When several do, the one whose window ends last limits: waiting only for an
    earlier window would find this one still used up. A tie goes to the outermost level (the
    order of ``windows``, :func:`budget_levels`'). Pure.

    Args:
        windows: each level's current window, outermost first.
        now: UTC-aware instant.

    Returns:
        The limiting level's window (the operation waits until its ``end``), or None.
    """
    limiting: LevelWindow | None = None
    for window in windows:
        if (window.left <= 0 or now >= window.closes_at) and (limiting is None or window.end > limiting.end):
            limiting = window
    return limiting


def window_bounds(now: datetime, window_seconds: float) -> tuple[datetime, datetime]:
    """The window holding ``now``: ``(start, end)``, aligned to the Unix epoch. Pure.

    Args:
        now: UTC-aware instant.
        window_seconds: the window's length, seconds (> 0).
    """
    elapsed = (now - _EPOCH).total_seconds()
    index = math.floor(elapsed / window_seconds)
    start = _EPOCH + timedelta(seconds=index * window_seconds)
    return start, start + timedelta(seconds=window_seconds)


def window_id(scope: str, start: datetime) -> UUID:
    """The id of the :class:`CallWindow` of ``scope`` starting at ``start``. Pure."""
    return uuid5(NAMESPACE_URL, f"opledger:call-window:{scope}:{start.isoformat()}")


class CallWindow(Aggregate):
    """The calls given out in one window of one budget scope."""

    class Opened(LedgerEvent, Aggregate.Created):
        scope: str
        start: datetime
        end: datetime
        limit: int

    class CallTaken(LedgerEvent, Aggregate.Event):
        """One call given out: to ``operation_id``, for a ``send`` or a ``lookup``."""

        operation_id: UUID
        kind: str
        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, object]) -> None:
            state["kind"] = "send"  # before lookups took calls, every call was a send

        def apply(self, window: CallWindow) -> None:
            window.calls += 1

    def __init__(self, scope: str, start: datetime, end: datetime, limit: int) -> None:
        self.scope = scope
        self.start = start
        self.end = end
        self.limit = limit
        self.calls = 0

    @classmethod
    def open(cls, *, scope: str, start: datetime, end: datetime, limit: int) -> CallWindow:
        """A new, empty window (id from :func:`window_id`)."""
        return cls._create(cls.Opened, id=window_id(scope, start), scope=scope, start=start, end=end, limit=limit)

    @property
    def left(self) -> int:
        """Calls still available in this window."""
        return max(self.limit - self.calls, 0)

    def take(self, operation_id: UUID, kind: str = "send") -> None:
        """Give one call to ``operation_id`` (``CallTaken``), for a ``send`` or a ``lookup``.

        Raises:
            ValueError: the window is full (callers check :attr:`left` first).
        """
        if self.left <= 0:
            raise ValueError(f"call window {self.scope} from {self.start.isoformat()} is full")
        self.trigger_event(self.CallTaken, operation_id=operation_id, kind=kind)
