"""The attempt and outcome commands: an attempt recorded before egress, and what ends it.

A mixin of ``ledger.operation.Operation``; the rules every command keeps are in ``ledger.commands``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from ledger import decisions
from ledger.approvals import void_reason
from ledger.clock import require_utc
from ledger.commands.base import CommandBase
from ledger.errors import AttemptBudgetExceededError, LeaseExpiredError
from ledger.facts import FactKind, storable_fact, storable_fact_or_none
from ledger.modes import rules_for
from ledger.outcomes import FailureCategory
from ledger.status import APPROVAL_DENIED, APPROVAL_REQUIRED, ExecutionState
from ledger.time_limits import require_later
from ledger.transition_errors import (
    AmbiguousRetryForbiddenError,
    ApprovalVoidError,
    AttemptsRemainError,
    AwaitingApprovalError,
    CancellationRequestedError,
    DeadlineNotPassedError,
)

if TYPE_CHECKING:
    pass

E = ExecutionState


class AttemptCommands(CommandBase):
    """The attempt and outcome commands of the ``Operation`` aggregate."""

    def start_attempt(self, *, epoch: int, now: datetime, attempt_id: UUID, request_fingerprint: str) -> int:
        """Record an attempt before any byte leaves (``AttemptStarted``). Attempts count here,
        so a worker killed during every attempt still exhausts the budget (invariant 2).

        Returns:
            The attempt number (1-based).

        Raises:
            StaleEpochError, LeaseExpiredError, AttemptBudgetExceededError,
            IllegalTransitionError (not claimed, cancel requested, or approval missing).
        """
        now = require_utc(now)
        self._allow("start_attempt")
        self._fence(epoch)
        if self.lease_expired(now):
            raise LeaseExpiredError(f"operation {self.id}: lease expired at {self.lease_expires_at}")
        if decisions.cancels_unsent(self):
            # After a possibly applied attempt the retry (same key, in a mode where that is safe)
            # is how the ledger learns what happened; a cancel then follows the evidence.
            raise CancellationRequestedError("start_attempt", "claimed", "cancellation was requested")
        if self.approval in (APPROVAL_REQUIRED, APPROVAL_DENIED):
            raise AwaitingApprovalError("start_attempt", "claimed", f"approval is {self.approval}")
        voided = void_reason(self, now)
        if voided is not None:  # egress needs an unexpired approval of the current fingerprint
            raise ApprovalVoidError("start_attempt", "claimed", voided)
        if decisions.attempts_left(self) == 0:
            raise AttemptBudgetExceededError(
                f"operation {self.id}: {self.attempts} of {self.max_attempts} attempts used")
        number = self.attempts + 1
        self.trigger_event(self.AttemptStarted, timestamp=now, epoch=epoch, attempt_id=attempt_id,
                           attempt_number=number, request_fingerprint=request_fingerprint)
        return number

    def succeed(self, *, epoch: int, now: datetime, attempt_id: UUID | None = None,
                status_code: int | None = None, remote_id: str | None = None, excerpt: str = "") -> None:
        """Record that the effect happened (``Succeeded``)."""
        self._allow("succeed")
        self._fence(epoch)
        self._attempt(attempt_id, "succeed")
        self.trigger_event(self.Succeeded, timestamp=require_utc(now), epoch=epoch, attempt_id=attempt_id,
                           status_code=status_code, remote_id=storable_fact_or_none(remote_id, FactKind.REMOTE_ID),
                           excerpt=storable_fact(excerpt, FactKind.EXCERPT))

    def fail(self, *, epoch: int, now: datetime, category: FailureCategory | str, retryable: bool,
             attempt_id: UUID | None = None, status_code: int | None = None, detail: str = "") -> None:
        """Record that the effect is known not to have happened or known to have failed."""
        self._allow("fail")
        self._fence(epoch)
        self._attempt(attempt_id, "fail")
        self.trigger_event(self.Failed, timestamp=require_utc(now), epoch=epoch, attempt_id=attempt_id,
                           category=FailureCategory(category).value, retryable=retryable,
                           status_code=status_code, detail=storable_fact(detail, FactKind.DETAIL))

    def mark_ambiguous(self, *, epoch: int, now: datetime, reason: str, attempt_id: UUID | None = None,
                       status_code: int | None = None, detail: str = "") -> None:
        """Record that egress may have happened and nothing says whether it applied."""
        self._allow("mark_ambiguous")
        self._fence(epoch)
        self._attempt(attempt_id, "mark_ambiguous")
        self.trigger_event(self.Ambiguous, timestamp=require_utc(now), epoch=epoch, attempt_id=attempt_id,
                           reason=storable_fact(reason, FactKind.REASON), status_code=status_code,
                           detail=storable_fact(detail, FactKind.DETAIL))

    def schedule_retry(self, *, epoch: int, now: datetime, attempt_id: UUID, retry_at: datetime,
                       category: FailureCategory | str, reason: str, possibly_applied: bool,
                       status_code: int | None = None, detail: str = "") -> None:
        """Close the open attempt and schedule another (``RetryScheduled``).

        Args:
            possibly_applied: whether the closed attempt may have applied (egress happened and
                the response was lost). Refused in ``non_idempotent`` mode (invariant 3).
            status_code: the closed attempt's HTTP status, if it had a response.
            detail: its bounded, redacted excerpt or error text (stored bounded again).

        Raises:
            AttemptBudgetExceededError: no attempt left; record ``exhaust_budget`` instead.
            IllegalTransitionError: not dispatching, or a non-idempotent retry of a possibly
                applied attempt.
        """
        now = require_utc(now)
        retry_at = require_utc(retry_at, "retry_at")
        self._allow("schedule_retry")
        self._fence(epoch)
        self._attempt(attempt_id, "schedule_retry")
        if possibly_applied and not rules_for(self.delivery_mode).retries_possibly_applied:
            raise AmbiguousRetryForbiddenError(
                "schedule_retry", self.execution.value,
                f"{self.delivery_mode.value} mode never retries an attempt that may have applied")
        if decisions.attempts_left(self) == 0:
            raise AttemptBudgetExceededError(
                f"operation {self.id}: {self.attempts} of {self.max_attempts} attempts used")
        require_later(now, self.deadlines[E.PENDING.value], "deadlines.pending")
        self.trigger_event(self.RetryScheduled, timestamp=now, epoch=epoch, attempt_id=attempt_id,
                           retry_at=max(retry_at, now), category=FailureCategory(category).value,
                           reason=storable_fact(reason, FactKind.REASON), possibly_applied=possibly_applied,
                           status_code=status_code, detail=storable_fact(detail, FactKind.DETAIL))

    def exceed_deadline(self, *, now: datetime) -> None:
        """Record that the current state's deadline passed (``DeadlineExceeded``).

        The outcome is ``failed`` when no attempt may have applied, else ``ambiguous``.

        Raises:
            IllegalTransitionError: no deadline applies, or it has not passed at ``now``.
        """
        now = require_utc(now)
        self._allow("exceed_deadline")
        deadline = self.deadline_at
        assert deadline is not None
        if now < deadline:
            raise DeadlineNotPassedError("exceed_deadline", self.execution.value,
                                         f"the deadline is {deadline.isoformat()}")
        ambiguous = decisions.deadline_ends_ambiguous(self)
        self.trigger_event(self.DeadlineExceeded, timestamp=now, state=self.execution.value,
                           deadline_at=deadline, ambiguous=ambiguous)

    def exhaust_budget(self, *, epoch: int, now: datetime, last_attempt_possibly_applied: bool,
                       status_code: int | None = None, detail: str = "") -> None:
        """Record that no attempt is left (``BudgetExhausted``): ``failed`` when every attempt is
        known not to have applied, else ``ambiguous``; with the last attempt's HTTP status and
        bounded detail, when it had them.

        Raises:
            IllegalTransitionError: attempts remain.
        """
        self._allow("exhaust_budget")
        self._fence(epoch)
        if decisions.attempts_left(self) > 0:
            raise AttemptsRemainError("exhaust_budget", self.execution.value,
                                         f"{self.max_attempts - self.attempts} attempts remain")
        ambiguous = self.possibly_applied or last_attempt_possibly_applied
        self.trigger_event(self.BudgetExhausted, timestamp=require_utc(now), epoch=epoch,
                           attempts=self.attempts, ambiguous=ambiguous, status_code=status_code,
                           detail=storable_fact(detail, FactKind.DETAIL))
