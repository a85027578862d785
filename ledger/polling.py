"""The poll schedule of accepted work: pure decisions (STYLE rule 4), asked by
``executors.polling``. What is *due* (a poll lease to take, the accepted deadline) stays in
``ledger.decisions.due_work``; this module says when the holder polls next.

The schedule is not in the log (an unchanged poll records nothing): the holder keeps it in
memory and a new holder derives it again from the last recorded fact.

Source: issue 12 item 2; docs/adr/0004-accepted-work.md.
"""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

from tenacity.wait import wait_exponential

from ledger.decisions import RandomSource
from ledger.declarations import Polling
from ledger.time_limits import later

POLL_JITTER = 0.1
"""Polls come up to this fraction of their delay early, so many operations accepted together
spread out (never earlier than a provider's ``Retry-After``)."""


def first_poll_at(*, polling: Polling, last_fact_at: datetime, now: datetime) -> datetime:
    """When a worker that just took accepted work polls it first (UTC).

    The poll schedule is not in the log (an unchanged poll records nothing), so it is derived
    from the last recorded fact: ``initial_delay_seconds`` after it, or at once when that is
    past (a worker resuming after another one died). Pure.

    Source: docs/adr/0004-accepted-work.md ("the schedule is derived, not stored").
    """
    at = later(last_fact_at, polling.initial_delay_seconds)
    return now if at is None or at < now else at


def poll_delay_seconds(*, polling: Polling, polls: int, overdue: bool, hint: float | None,
                       rng: RandomSource) -> float:
    """Seconds until the next poll of accepted work. Pure.

    Before the ``accepted`` deadline: exponential from ``initial_delay_seconds`` (doubling per
    unchanged poll, via tenacity like retries) capped at ``max_interval_seconds``; after it
    (``remote_unknown``): ``overdue_interval_seconds``. Up to :data:`POLL_JITTER` of it early,
    and never sooner than the provider's ``Retry-After`` hint.

    Args:
        polling: the declaration's polling section.
        polls: polls made since the remote status last changed (0 for the next after a change).
        overdue: the accepted deadline passed (``Operation.remote_overdue``).
        hint: the provider's ``Retry-After``, seconds, or None.
        rng: random source for the jitter.

    Source: issue 12 item 2; RFC 9110 §10.2.3 (Retry-After).
    """
    if overdue:
        delay = polling.overdue_interval_seconds
    else:
        curve = wait_exponential(multiplier=polling.initial_delay_seconds, max=polling.max_interval_seconds)
        delay = float(curve(SimpleNamespace(attempt_number=max(1, polls + 1))))  # type: ignore[arg-type]
    delay *= 1.0 - POLL_JITTER * rng.random()
    return max(delay, hint) if hint is not None else delay
