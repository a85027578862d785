"""Pure decisions after an attempt: what to record for its outcome, and the backoff of a retry
(DESIGN §5; STYLE rules 4 and 16). Re-exported by ``ledger.decisions``, where every decision is
asked for.

Source: DESIGN §5, §7; docs/adr/0002-executor-services.md (the decision table).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Protocol

from tenacity.wait import wait_exponential

from ledger.declarations import DeliveryMode, RetryPolicy
from ledger.modes import AfterLostResponse, rules_for
from ledger.outcomes import Accepted, Ambiguous, Failed, FailureCategory, Outcome, Succeeded
from ledger.time_limits import later


class RandomSource(Protocol):
    """The part of ``random.Random`` that jitter needs (the simulator passes its seeded one)."""

    def random(self) -> float: ...



@dataclass(frozen=True, slots=True)
class Record:
    """Record ``outcome`` as the attempt's result (a terminal or accepted fact)."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Retry:
    """Close the attempt and schedule another at ``at`` (UTC), keeping the closed attempt's
    evidence: its HTTP status (if any) and its bounded, redacted detail (issue 34 item 5)."""

    at: datetime
    category: FailureCategory
    reason: str
    possibly_applied: bool
    status_code: int | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class GiveUp:
    """No attempt left: record ``BudgetExhausted``, with the last attempt's status and detail."""

    last_attempt_possibly_applied: bool
    status_code: int | None = None
    detail: str = ""


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

    Args:
        policy: the declared retry policy.
        attempt_number: attempts used so far (1-based; values below 1 count as 1).
        rng: the random source for jitter (required, so the simulator's seed decides it).
    """
    curve = wait_exponential(multiplier=policy.base_backoff_seconds, max=policy.max_backoff_seconds)
    delay = curve(SimpleNamespace(attempt_number=max(1, attempt_number)))  # type: ignore[arg-type]
    return float(delay) * (1.0 - policy.jitter * rng.random())


def decide(*, outcome: Outcome, mode: DeliveryMode, policy: RetryPolicy, attempts: int, now: datetime,
           rng: RandomSource, after_lookup: bool = False) -> Decision:
    """Decide what to record for one attempt's outcome.

    Args:
        outcome: what the adapter (or a lookup) returned; a worker lost mid-attempt is
            ``Ambiguous(reason="worker_lost")``.
        mode: the integration's delivery mode (its rules: ``ledger.modes``).
        policy: the retry policy (budget and backoff).
        attempts: attempts used so far, including this one.
        now: UTC-aware instant.
        rng: random source for jitter.
        after_lookup: the outcome came from a ``recoverable_remote_id`` lookup.

    Returns:
        ``Record``, ``Retry``, ``GiveUp``, ``Lookup`` or ``AwaitCallback``. Source: DESIGN §5.
    """
    if isinstance(outcome, (Succeeded, Accepted)):
        return Record(outcome)
    if isinstance(outcome, Failed):
        if not outcome.retryable:
            return Record(outcome)
        return _retry_or_give_up(policy, attempts, now, rng, outcome, outcome.detail or outcome.category.value,
                                 possibly_applied=False, hint=outcome.retry_after)
    assert isinstance(outcome, Ambiguous)
    rule = rules_for(mode).after_lost_response
    if rule is AfterLostResponse.RETRY:
        # The provider dedupes on the stable key (or there is no effect): the same key is safe.
        return _retry_or_give_up(policy, attempts, now, rng, outcome, outcome.reason,
                                 possibly_applied=True, hint=None)
    if rule is AfterLostResponse.LOOK_UP and not after_lookup:
        return Lookup()
    if rule is AfterLostResponse.AWAIT_CALLBACK:
        return AwaitCallback(outcome.reason)
    return Record(outcome)


def after_lookup(*, found: Outcome | None, policy: RetryPolicy, attempts: int, now: datetime,
                 rng: RandomSource) -> Decision:
    """Decide from a ``recoverable_remote_id`` lookup.

    Args:
        found: the provider's answer: ``None`` means it never received the operation, so
            another attempt is safe; a ``Failed`` means the lookup could not be made and is
            recorded as ``Ambiguous(lookup_failed)``; anything else is recorded as found (an
            ``Ambiguous`` when the lookup itself failed).
        policy, attempts, now, rng: as :func:`decide`.
    """
    if found is None:
        not_received = Failed(FailureCategory.TIMEOUT, retryable=True, detail="provider did not receive it")
        return _retry_or_give_up(policy, attempts, now, rng, not_received, not_received.detail,
                                 possibly_applied=False, hint=None)
    if isinstance(found, Failed):
        # A lookup that could not be made (refused, not sent) says nothing about the attempt,
        # which may have applied: ambiguous, never a terminal failure.
        return Record(Ambiguous(reason="lookup_failed", category=found.category, status_code=found.status_code,
                                detail=found.detail))
    return Record(found)


def _retry_or_give_up(policy: RetryPolicy, attempts: int, now: datetime, rng: RandomSource,
                      outcome: Failed | Ambiguous, reason: str, *, possibly_applied: bool,
                      hint: float | None) -> Decision:
    if attempts >= policy.max_attempts:
        return GiveUp(last_attempt_possibly_applied=possibly_applied, status_code=outcome.status_code,
                      detail=outcome.detail)
    delay = backoff_seconds(policy, attempts, rng)
    if hint is not None:
        delay = max(delay, hint)  # Retry-After says when the provider can take it again
    at = later(now, delay)
    if at is None:
        # No retry can be scheduled (a Retry-After beyond year 9999): the attempt's outcome is
        # the operation's, recorded as it came (failed, or ambiguous if it may have applied).
        return Record(outcome)
    return Retry(at=at, category=outcome.category, reason=reason, possibly_applied=possibly_applied,
                 status_code=outcome.status_code, detail=outcome.detail)
