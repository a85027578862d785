"""Limits on the durations and instants the ledger computes with, and the one rule that checks
them. Pure.

Python datetimes end at 9999-12-31 23:59:59.999999 and a ``timedelta`` holds at most
999,999,999 days. A declaration whose deadline is ``10**12`` seconds, an infinite lease, or an
intent whose ``now`` is in year 9999 used to be recorded, and then every worker that computed
the operation's deadline raised ``OverflowError``, forever. Durations are now bounded when a
declaration or a setting is parsed (the maxima below), and every instant a command derives from
``now`` is checked by :func:`require_later` before anything is recorded.

Each maximum is in seconds and is far above any sensible value, so it only refuses mistakes;
the reason for each is on it.

Source: issue 10 item 3 ("declarations and intents whose deadlines, backoffs or lease times
cannot be represented are refused when parsed or intended"); DESIGN §4 invariant 6 (every
non-terminal state has a deadline).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ledger.errors import UnrepresentableTimeError

if TYPE_CHECKING:
    from ledger.declarations import Integration

DAY_SECONDS = 86_400

MAX_DEADLINE_SECONDS = 366 * DAY_SECONDS
"""A state's deadline (``deadlines.*``): one year. Long enough for the slowest remote operation
(bank transfers, manual reviews take weeks); work that waits longer should be a new intent."""
MAX_BASE_BACKOFF_SECONDS = DAY_SECONDS
"""The first retry delay (``retry.base_backoff_seconds``): a day."""
MAX_BACKOFF_SECONDS = 7 * DAY_SECONDS
"""The longest retry delay (``retry.max_backoff_seconds``): a week, past any provider outage
worth waiting out; the exponential curve is capped here."""
MAX_REQUEST_TIMEOUT_SECONDS = 600
"""One HTTP exchange (``request_timeout_seconds``): ten minutes, past any synchronous API."""
MAX_SETTLEMENT_BACKOFF_SECONDS = 3600
"""The first settlement retry delay (``settlement.backoff_seconds``): an hour."""
MAX_SETTLEMENT_DELAY_SECONDS = 7 * DAY_SECONDS
"""The longest settlement retry delay a declaration may lead to: a week. The executor doubles
``backoff_seconds`` per failed try with no cap, so ``backoff * 2**(max_attempts - 2)`` must stay
under this; past about 47 tries it would overflow ``timedelta`` itself."""
MAX_BUDGET_WINDOW_SECONDS = 31 * DAY_SECONDS
"""A call-budget window (``budgets.window_seconds``): a month, the longest billing period."""
MIN_BUDGET_WINDOW_SECONDS = 1.0
"""The shortest call-budget window (``window_seconds``), seconds: a call counted in a window must
reach the provider before it ends (``executors.budgets.send_margin``), and a shorter window
closes before a worker's pass and a request can fit in it: every call would be refused unsent."""
MAX_LEASE_SECONDS = 3600
"""A worker lease (``OPLEDGER_LEASE_SECONDS``): an hour. Leases are renewed while work runs; a
longer one only delays recovery of a dead worker's operations by as much."""
MAX_POLL_INTERVAL_SECONDS = 60
"""An idle worker's wait (``OPLEDGER_POLL_INTERVAL_SECONDS``): a minute. SIGTERM cuts it short,
but new work waits as long, so a longer wait only delays it."""
MAX_GRACE_SECONDS = 900
"""How long a stopping worker lets in-flight calls finish (``OPLEDGER_GRACE_SECONDS``): fifteen
minutes, past the longest request timeout; supervisors kill long before (Kubernetes: 30 s)."""

_LATEST = datetime.max.replace(tzinfo=UTC)


def later(start: datetime, seconds: float) -> datetime | None:
    """``start + seconds``, or None when the result cannot be represented (past 9999-12-31).

    For reading what is already stored (``ledger.decisions``): a stored deadline that cannot be
    represented is reported, never raised. Commands refuse instead (:func:`require_later`).

    Args:
        start: a UTC instant.
        seconds: a finite duration, seconds.
    """
    try:
        return start + timedelta(seconds=seconds)
    except (OverflowError, ValueError):  # past 9999-12-31, or an infinite or NaN duration
        return None


def require_later(now: datetime, seconds: float, what: str) -> datetime:
    """Return ``now + seconds``, or refuse when the result cannot be represented. Pure.

    Args:
        now: UTC-aware instant.
        seconds: a finite, non-negative duration in seconds.
        what: what the duration is (``"lease_seconds"``, ``"deadlines.pending"``), for the error.

    Returns:
        The instant ``seconds`` after ``now``.

    Raises:
        UnrepresentableTimeError: ``seconds`` is NaN, infinite, negative or not a number, or
            ``now + seconds`` is past 9999-12-31 (the end of Python's datetimes).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise UnrepresentableTimeError(f"{what} must be a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise UnrepresentableTimeError(f"{what} must be a finite number of seconds >= 0, got {seconds!r}")
    result = later(now, seconds)
    if result is None:
        raise UnrepresentableTimeError(
            f"{now.isoformat()} + {what} ({seconds:g} s) is past {_LATEST.isoformat()}, the latest "
            "time the ledger can store: check the clock the command was given (a fake clock far "
            "in the future?) and the duration")
    return result


def intent_time_problems(integration: Integration, now: datetime) -> list[str]:
    """List every time an intent at ``now`` would derive that cannot be represented. Pure.

    Checked: each state's deadline, the longest retry delay, the request timeout, the longest
    settlement delay and the budget window, each counted from ``now``. The declaration's own
    bounds keep each duration finite; this catches ``now`` too close to the end of time.

    Args:
        integration: the declaration the intent runs under.
        now: UTC-aware instant of the intent.

    Returns:
        One line per problem (empty when every derived time is representable).
    """
    durations: dict[str, float] = {f"deadlines.{state}": s for state, s in integration.deadline_seconds.items()}
    durations["retry.max_backoff_seconds"] = integration.retry.max_backoff_seconds
    durations["request_timeout_seconds"] = integration.request_timeout_seconds
    durations["budgets.window_seconds"] = integration.budgets.window_seconds
    if integration.settlement is not None:
        durations["settlement (longest retry delay)"] = settlement_worst_delay(
            integration.settlement.backoff_seconds, integration.settlement.max_attempts)
    problems = []
    for what, seconds in durations.items():
        try:
            require_later(now, seconds, what)
        except UnrepresentableTimeError as exc:
            problems.append(str(exc))
    return problems


def require_intent_times(integration: Integration, now: datetime) -> None:
    """Refuse an intent at ``now`` whose derived times cannot be represented. Pure.

    Raises:
        UnrepresentableTimeError: listing every problem of :func:`intent_time_problems`.
    """
    problems = intent_time_problems(integration, now)
    if problems:
        raise UnrepresentableTimeError(
            f"intent for integration {integration.name!r} at {now.isoformat()} is refused:\n"
            + "\n".join(f"  - {p}" for p in problems))


def settlement_worst_delay(backoff_seconds: float, max_attempts: int) -> float:
    """The longest delay the settlement executor waits between tries, seconds. Pure.

    The executor waits ``backoff_seconds * 2**tries_failed`` and blocks at the last try, so the
    longest wait follows the ``max_attempts - 1``-th failure: ``backoff * 2**(max_attempts - 2)``.
    Returns ``inf`` when that does not fit a float.
    """
    try:
        return backoff_seconds * 2.0 ** max(max_attempts - 2, 0)
    except OverflowError:
        return math.inf
