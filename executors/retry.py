"""What to record after an egress: pure decisions from the outcome, the delivery mode and the
attempt budget (DESIGN §5; STYLE rule 4).

``decide`` takes ``now`` and the random source for jitter as arguments and returns a value; the
executor does the I/O. The exponential backoff curve comes from tenacity; jitter is applied here
with the injected random source so the simulator stays deterministic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Protocol

from tenacity.wait import wait_exponential

from ledger.declarations import DeliveryMode, RetryPolicy
from ledger.outcomes import Accepted, Ambiguous, Failed, FailureCategory, Outcome, Succeeded


class RandomSource(Protocol):
    """The part of ``random.Random`` that jitter needs."""

    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Record:
    """Record ``outcome`` as the attempt's result (a terminal or accepted fact)."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Retry:
    """Close the attempt and schedule another at ``at`` (UTC)."""

    at: datetime
    category: FailureCategory
    reason: str
    possibly_applied: bool


@dataclass(frozen=True, slots=True)
class GiveUp:
    """No attempt left: record ``BudgetExhausted``."""

    last_attempt_possibly_applied: bool


@dataclass(frozen=True, slots=True)
class Lookup:
    """Ask the provider whether it received the operation, then decide again."""


@dataclass(frozen=True, slots=True)
class AwaitCallback:
    """The provider reports by calling us: treat the request as accepted and wait for the
    authenticated callback until the ``accepted`` deadline (DESIGN §5, ``callback`` mode)."""

    reason: str


Decision = Record | Retry | GiveUp | Lookup | AwaitCallback


def backoff_seconds(policy: RetryPolicy, attempt_number: int, rng: RandomSource) -> float:
    """Delay before attempt ``attempt_number + 1``, seconds.

    Exponential (``base * 2**(n-1)``, capped at ``max_backoff_seconds``, via tenacity), then
    reduced by up to ``jitter`` of itself so that retries of many operations spread out.
    """
    curve = wait_exponential(multiplier=policy.base_backoff_seconds, max=policy.max_backoff_seconds)
    delay = curve(SimpleNamespace(attempt_number=max(1, attempt_number)))  # type: ignore[arg-type]
    return delay * (1.0 - policy.jitter * rng.random())


def decide(
    *,
    outcome: Outcome,
    mode: DeliveryMode,
    policy: RetryPolicy,
    attempts: int,
    now: datetime,
    rng: RandomSource | None = None,
    after_lookup: bool = False,
) -> Decision:
    """Decide what to record for one attempt's outcome.

    Args:
        outcome: what the adapter (or a lookup) returned; a worker lost mid-attempt is
            ``Ambiguous(reason="worker_lost")``.
        mode: the integration's delivery mode.
        policy: the retry policy (budget and backoff).
        attempts: attempts used so far, including this one.
        now: UTC-aware instant.
        rng: random source for jitter (default: a fresh ``random.Random()``).
        after_lookup: the outcome came from a ``recoverable_remote_id`` lookup.

    Returns:
        ``Record``, ``Retry``, ``GiveUp``, ``Lookup`` or ``AwaitCallback``. Source: DESIGN §5.
    """
    rng = rng or random.Random()
    if isinstance(outcome, (Succeeded, Accepted)):
        return Record(outcome)
    if isinstance(outcome, Failed):
        if not outcome.retryable:
            return Record(outcome)
        return _retry_or_give_up(policy, attempts, now, rng, outcome.category, outcome.detail or outcome.category.value,
                                 possibly_applied=False, hint=outcome.retry_after)
    assert isinstance(outcome, Ambiguous)
    if mode in (DeliveryMode.IDEMPOTENT, DeliveryMode.READ_ONLY):
        # The provider dedupes on the stable key (or there is no effect): the same key is safe.
        return _retry_or_give_up(policy, attempts, now, rng, outcome.category, outcome.reason,
                                 possibly_applied=True, hint=None)
    if mode is DeliveryMode.RECOVERABLE_REMOTE_ID and not after_lookup:
        return Lookup()
    if mode is DeliveryMode.CALLBACK:
        return AwaitCallback(outcome.reason)
    return Record(outcome)


def after_lookup(
    *, found: Outcome | None, policy: RetryPolicy, attempts: int, now: datetime, rng: RandomSource | None = None,
) -> Decision:
    """Decide from a ``recoverable_remote_id`` lookup: ``None`` means the provider never
    received the operation, so another attempt is safe; anything else is recorded as found."""
    if found is None:
        return _retry_or_give_up(policy, attempts, now, rng or random.Random(), FailureCategory.TIMEOUT,
                                 "provider did not receive it", possibly_applied=False, hint=None)
    return Record(found)


def _retry_or_give_up(
    policy: RetryPolicy, attempts: int, now: datetime, rng: RandomSource, category: FailureCategory,
    reason: str, *, possibly_applied: bool, hint: float | None,
) -> Decision:
    if attempts >= policy.max_attempts:
        return GiveUp(last_attempt_possibly_applied=possibly_applied)
    delay = backoff_seconds(policy, attempts, rng)
    if hint is not None:
        delay = max(delay, hint)  # Retry-After says when the provider can take it again
    return Retry(at=now + timedelta(seconds=delay), category=category, reason=reason,
                 possibly_applied=possibly_applied)
