"""Retention: which closed operations may leave the hot store for an archive, and when.

An operation may be archived when nothing more will happen to it without an operator and it
has been closed for longer than the retention policy: its execution is terminal (succeeded,
failed, cancelled) and its settlement decided (settled, or none required), or an operator
abandoned it; it is not pending settlement and not on the attention queue. The store driver
selects candidates by the same rule (``select_archivable``); :func:`is_archivable` confirms each
one, so a row the driver's query let through by mistake is never archived.

The policy is store-wide (``OPLEDGER_RETENTION``, a duration; off by default) with an optional
per-integration override (``retention_seconds`` in the declaration); :func:`retention_for`
picks the one that applies. Durations are written ``90d``, ``12h``, ``30m``, ``45s``, ``2w`` or a
number of seconds (:func:`parse_duration`).

Source: issue 29 item 1; docs/adr/0010-archives.md §1.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

from ledger.clock import require_utc
from ledger.status import TERMINAL_EXECUTION_STATES, ExecutionState, SettlementState

__all__ = ["CLOSED_SETTLEMENTS", "MAX_RETENTION_SECONDS", "cutoff_for", "is_archivable", "parse_duration",
           "retention_for"]

CLOSED_SETTLEMENTS: frozenset[SettlementState] = frozenset({SettlementState.SETTLED, SettlementState.NOT_REQUIRED})
"""Settlement states in which an operation with a terminal execution state is closed."""
ABANDONED = "abandoned"
"""The disposition of an operation an operator abandoned (``Resolved`` with ``abandon``): closed
whatever its states, since nothing will move it again."""
MAX_RETENTION_SECONDS = 100 * 365 * 86_400.0
"""The longest duration accepted (a century): past it a cutoff leaves ``datetime``'s range."""
_UNITS = {"s": 1.0, "m": 60.0, "h": 3_600.0, "d": 86_400.0, "w": 7 * 86_400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str) -> float:
    """A duration as seconds, from ``90d``, ``12h``, ``30m``, ``45s``, ``2w`` or a bare number of
    seconds (``3600``, ``1.5``).

    Args:
        text: the duration as written in ``OPLEDGER_RETENTION`` or ``--before``.

    Returns:
        Seconds, > 0 and at most :data:`MAX_RETENTION_SECONDS`.

    Raises:
        ValueError: anything else (a negative, zero, unknown unit, or too long), with a message
            naming the accepted forms.
    """
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration: write e.g. 90d, 12h, 30m, 45s, 2w or a number of seconds")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not 0 < seconds <= MAX_RETENTION_SECONDS or not math.isfinite(seconds):
        raise ValueError(f"duration {text!r} must be more than 0 s and at most a century")
    return seconds


def retention_for(store_seconds: float | None, integration_seconds: float | None) -> float | None:
    """The retention that applies to one integration's operations, seconds, or None (kept forever).

    Args:
        store_seconds: the store-wide policy (``Settings.retention_seconds``), None when off.
        integration_seconds: the declaration's ``retention_seconds``, None when not declared.

    Returns:
        The integration's own policy when declared, else the store's.
    """
    return integration_seconds if integration_seconds is not None else store_seconds


def cutoff_for(now: datetime, retention_seconds: float) -> datetime:
    """The close time before which an operation has been kept long enough.

    Args:
        now: the current time, timezone-aware (injected).
        retention_seconds: the policy that applies, seconds.

    Returns:
        ``now - retention_seconds``.

    Raises:
        NaiveDatetimeError: ``now`` is naive.
    """
    return require_utc(now, "now") - timedelta(seconds=retention_seconds)


def is_archivable(*, execution: str, settlement: str, disposition: str | None, attention: str | None,
                  closed_at: datetime, cutoff: datetime) -> bool:
    """Whether an operation may leave the hot store for an archive. Pure.

    Args:
        execution: its execution state (``ledger.status.ExecutionState`` value).
        settlement: its settlement state (``ledger.status.SettlementState`` value).
        disposition: how it was closed (``settled``, ``resolved``, ``cancelled``, ``abandoned``)
            or None.
        attention: its attention reason, None when it is not on the attention queue.
        closed_at: when it last changed (the status view's ``updated_at``), UTC-aware.
        cutoff: operations closed strictly before this may go (:func:`cutoff_for`), UTC-aware.

    Returns:
        True when closed (terminal execution with settlement decided, or abandoned by an
        operator), not pending settlement, not on the attention queue, and closed before
        ``cutoff``.

    Raises:
        NaiveDatetimeError: a time is naive.

    Source: issue 29 item 1; docs/adr/0010-archives.md §1.
    """
    if attention is not None or settlement == SettlementState.PENDING.value:
        return False
    terminal = ExecutionState(execution) in TERMINAL_EXECUTION_STATES
    closed = disposition == ABANDONED or (terminal and SettlementState(settlement) in CLOSED_SETTLEMENTS)
    return closed and require_utc(closed_at, "closed_at") < require_utc(cutoff, "cutoff")
