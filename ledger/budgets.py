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

Source: issue 14 item 1; DESIGN §7 ("budgets ... checked before egress, never after").
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate

from ledger.codec import LedgerEvent
from ledger.declarations import Integration

__all__ = ["CallWindow", "budget_scope", "window_bounds", "window_id"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def budget_scope(integration: Integration, tenant: str) -> str | None:
    """The budget key an attempt of ``integration`` for ``tenant`` counts against, or None when
    the declaration has no call budget. Pure."""
    budgets = integration.budgets
    if budgets.calls_per_window is None:
        return None
    if budgets.scope == "tenant":
        return f"{integration.name}|tenant={tenant}"
    return integration.name


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
        operation_id: UUID

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

    def take(self, operation_id: UUID) -> None:
        """Give one call to ``operation_id`` (``CallTaken``).

        Raises:
            ValueError: the window is full (callers check :attr:`left` first).
        """
        if self.left <= 0:
            raise ValueError(f"call window {self.scope} from {self.start.isoformat()} is full")
        self.trigger_event(self.CallTaken, operation_id=operation_id)
