"""Pure settlement decisions: which settlement of an entity goes first, what follows a failed
settlement action, and whether a settler may settle the outcome it read (DESIGN §7; STYLE rules
4 and 16). Re-exported by ``ledger.decisions``.

Source: DESIGN §4 invariant 4, §7; issue 32 item 3; docs/adr/0002-executor-services.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from uuid import UUID

from ledger.identity import Source
from ledger.time_limits import later


class SettlementSource(Protocol):
    """The fields of an operation that :func:`settlement_order` reads."""

    @property
    def id(self) -> UUID: ...

    @property
    def source(self) -> Source: ...


def settlement_order(op: SettlementSource) -> tuple[int, UUID]:
    """Which of one entity's settlements goes first when several are due at once: the lowest
    effect index (the order the transition intended its effects in), then the operation id.
    Settlements of one entity are applied one per batch (they would conflict on its version),
    so this fixes the order however many workers there are and however they crashed.

    Source: issue 17 ("deterministic recovery"); docs/adr/0002-executor-services.md.
    """
    return op.source.effect_index, op.id


@dataclass(frozen=True, slots=True)
class RetrySettlement:
    """Record ``SettlementFailed`` and try the action again at ``at`` (UTC), without egress."""

    at: datetime


@dataclass(frozen=True, slots=True)
class BlockSettlement:
    """Record ``SettlementBlocked``: the tries are used up; an operator decides."""


SettlementDecision = RetrySettlement | BlockSettlement


def settlement_try_left(tries_used: int, max_tries: int) -> bool:
    """Whether a settlement failure after ``tries_used`` failed tries leaves another try of
    ``max_tries`` (else the settlement is blocked). Pure. Source: DESIGN §7."""
    return tries_used + 1 < max_tries


def after_settlement_failure(*, tries_used: int, max_tries: int, backoff_seconds: float,
                             now: datetime) -> SettlementDecision:
    """Decide what follows a failed settlement action.

    Args:
        tries_used: settlement tries already recorded as failed, before this one.
        max_tries: the declaration's ``settlement.max_attempts``.
        backoff_seconds: the declaration's ``settlement.backoff_seconds`` (doubled per try).
        now: UTC-aware instant.

    Returns:
        ``BlockSettlement`` once this failure uses the last try, else ``RetrySettlement``.

    Source: DESIGN §7 ("settlement retries with backoff, and ends in SettlementBlocked").
    """
    if not settlement_try_left(tries_used, max_tries):
        return BlockSettlement()
    at = later(now, backoff_seconds * (2 ** tries_used))
    return BlockSettlement() if at is None else RetrySettlement(at)


@dataclass(frozen=True, slots=True)
class OutcomeRef:
    """The outcome a settler settles: the attempt whose outcome it read (None when the
    operation ended without an attempt: cancelled, denied or past its deadline while pending)
    and the fencing epoch under which that outcome was recorded."""

    attempt_id: UUID | None
    epoch: int | None


class RecordedOutcome(Protocol):
    """The fields of an operation that :func:`settlement_fence_problem` reads."""

    outcome_attempt_id: UUID | None
    outcome_epoch: int | None


def settlement_fence_problem(op: RecordedOutcome, settles: OutcomeRef) -> str | None:
    """Why a settler may not settle ``settles`` on ``op``, or None when it may. Pure.

    A settlement applies one recorded outcome: the one of the attempt the ledger recorded it
    for, under the epoch it was recorded in. A settler that read another (a zombie worker
    holding a copy from before a takeover, a retried change on a fresh load that now holds a
    different outcome) is refused before the entity's action runs, so its entity is never
    changed.

    Args:
        op: the operation as stored now.
        settles: the outcome the settler read.

    Returns:
        None, or the reason (its epoch is stale; its attempt is not the recorded outcome's).

    Source: issue 32 item 3 ("fenced settlement"); DESIGN §4 invariants 4 and 5.
    """
    if settles.epoch != op.outcome_epoch:
        return (f"it settles the outcome read under epoch {settles.epoch}, but the recorded outcome is of "
                f"epoch {op.outcome_epoch} (stale)")
    if settles.attempt_id != op.outcome_attempt_id:
        return (f"it settles the outcome of attempt {settles.attempt_id}, but the recorded outcome is of "
                f"attempt {op.outcome_attempt_id}")
    return None
