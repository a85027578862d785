"""One error per lifecycle rule: every ``IllegalTransitionError`` raised is one of these.

Each class is named after the rule a command broke, and says what happened and how to fix it
(STYLE rules 9 and 20). All are subclasses of :class:`ledger.errors.IllegalTransitionError`,
so an ``except IllegalTransitionError`` written before them keeps catching every one. Each
carries the ``command``, the ``state`` and the ``detail`` of its root. ``rule`` names the rule
in ``ledger.transitions`` (the transition table's guard column; the model's planted bugs use
the same names).

Source: issue 33 item 1; docs/adr/0001-operation-lifecycle.md (the transition table).
"""

from __future__ import annotations

from ledger.errors import IllegalTransitionError

__all__ = [
    "AlreadyAbandonedError",
    "AmbiguousRetryForbiddenError",
    "ApprovalAlreadyDecidedError",
    "ApprovalStillValidError",
    "ApprovalVoidError",
    "AttemptsRemainError",
    "AwaitingApprovalError",
    "BudgetWaitNotOverError",
    "CallBudgetUsedUpError",
    "CancelNotRequestedError",
    "CancellationRequestedError",
    "DeadlineNotPassedError",
    "DigestNotMismatchedError",
    "LeaseHeldError",
    "NoAttemptLeftError",
    "NotAllowedInStateError",
    "NotDueError",
    "NotLatestAttemptError",
    "NotLeasedError",
    "NothingToResolveError",
    "RemoteNotOverdueableError",
    "ResolutionDoesNotFitError",
    "SettlementTriesExhaustedError",
    "WaitNotLaterError",
]


class NotAllowedInStateError(IllegalTransitionError):
    """The command's row of the transition table does not include the operation's current
    execution (or settlement) state. Nothing was recorded. Fix: reload the operation and decide
    again from its current state (``ledger.decisions.due_work``)."""

    rule = "state"


class ApprovalAlreadyDecidedError(IllegalTransitionError):
    """An approval was granted or denied for an operation whose approval is not required or was
    already decided. Fix: look at the operation again; a voided approval is granted anew."""

    rule = "approval_undecided"


class ApprovalStillValidError(IllegalTransitionError):
    """``void_approval`` was called while the granted approval still allows egress (not expired,
    same fingerprint). Fix: nothing to void; claim the operation instead."""

    rule = "approval_void"


class AwaitingApprovalError(IllegalTransitionError):
    """A claim or an attempt was refused: the operation needs an approval it does not have
    (required and undecided, or denied). Fix: have an approver grant it (``opledger approve``)."""

    rule = "approved"


class ApprovalVoidError(IllegalTransitionError):
    """A claim or an attempt was refused: the granted approval expired or names another
    fingerprint. Fix: record ``void_approval`` and have it approved again."""

    rule = "approval_valid"


class NotDueError(IllegalTransitionError):
    """A pending operation was claimed (or its budget wait recorded) before its ``due_at``. Fix:
    wait until ``ledger.decisions.due_work`` says ``Claim``."""

    rule = "due"


class LeaseHeldError(IllegalTransitionError):
    """Another worker's lease is still live: the operation cannot be taken over, waited for
    unleased, or cancelled without its holder's epoch. Fix: let the holder act, or wait until
    the lease lapses (``ledger.decisions.due_work`` says ``Reclaim``)."""

    rule = "lease_free"


class BudgetWaitNotOverError(IllegalTransitionError):
    """A recorded call budget wait (``BudgetWaited``) is not over: the operation is not
    claimable, and no second wait is recorded for it. Fix: wait until ``budget_wait_until``."""

    rule = "budget_wait_over"


class WaitNotLaterError(IllegalTransitionError):
    """A budget wait named a next window that is not after ``now``. Fix: pass the limiting
    level's window end (``ledger.budgets.limiting_level``)."""

    rule = "wait_later"


class NotLeasedError(IllegalTransitionError):
    """A budget wait was recorded with an epoch on a pending operation, which no one leases.
    Fix: record it without an epoch."""

    rule = "leased"


class CallBudgetUsedUpError(IllegalTransitionError):
    """A claim planned a call but a call budget level had no call left when it was taken (the
    window filled between the check and the take). Nothing was claimed or sent. Fix: none needed;
    the operation stays due and records ``BudgetWaited`` on the next pass."""

    rule = "call_budget"


class DigestNotMismatchedError(IllegalTransitionError):
    """A declaration mismatch was flagged with the digest the operation recorded: there is no
    mismatch. Fix: claim it; this worker's declaration is the recorded one."""

    rule = "digest_differs"


class CancellationRequestedError(IllegalTransitionError):
    """An attempt was refused because cancellation was requested and no earlier attempt may have
    applied: nothing is sent for a cancelled operation. Fix: record ``cancel`` instead."""

    rule = "not_cancelled"


class NotLatestAttemptError(IllegalTransitionError):
    """An outcome, acceptance, retry or callback named an attempt that is not the operation's
    latest: a late answer to an older attempt never becomes the operation's outcome. Fix: drop
    it; the latest attempt's outcome is recorded by its own holder."""

    rule = "latest_attempt"


class AmbiguousRetryForbiddenError(IllegalTransitionError):
    """A retry was asked for an attempt that may have applied, in a delivery mode whose rules
    never repeat one (``non_idempotent``, ``callback``, ``recoverable_remote_id``: DESIGN §4
    invariant 3). Fix: record ``Ambiguous`` (or look the attempt up) and let an operator
    resolve it."""

    rule = "ambiguity"


class CancelNotRequestedError(IllegalTransitionError):
    """``cancel`` or ``cancel_failed`` was recorded without a ``CancelRequested`` before it.
    Fix: record ``request_cancel`` first."""

    rule = "cancel_requested"


class DeadlineNotPassedError(IllegalTransitionError):
    """A deadline (or the ``accepted`` deadline of ``mark_remote_unknown``) was recorded as
    passed before it passed. Fix: wait until ``Operation.deadline_at``."""

    rule = "deadline_passed"


class RemoteNotOverdueableError(IllegalTransitionError):
    """``mark_remote_unknown`` was called for accepted work with no hard limit recorded (its
    deadline ends it), or already marked overdue. Fix: record ``exceed_deadline`` instead."""

    rule = "hard_limit"


class AttemptsRemainError(IllegalTransitionError):
    """``exhaust_budget`` was recorded while attempts remain. Fix: start or schedule another
    attempt (``ledger.decisions.decide``)."""

    rule = "budget_used"


class SettlementTriesExhaustedError(IllegalTransitionError):
    """A settlement failure was recorded as retryable, but it used the last settlement try. Fix:
    record ``block_settlement`` (``ledger.decisions.after_settlement_failure``)."""

    rule = "settlement_tries"


class AlreadyAbandonedError(IllegalTransitionError):
    """An operator tried to resolve an operation already abandoned. Fix: nothing; an abandoned
    operation is closed."""

    rule = "not_abandoned"


class NothingToResolveError(IllegalTransitionError):
    """``resolve`` was called for an operation that is not ambiguous, remote-unknown, blocked in
    settlement, holding a late observation or a refused write. Fix: look at it again
    (``opledger ops show``): automated progress has not stopped."""

    rule = "resolvable"


class ResolutionDoesNotFitError(IllegalTransitionError):
    """The resolution is not one this operation's state allows (e.g. ``retry`` for a blocked
    settlement, ``abandon`` for accepted work the provider may still run). Fix: choose one the
    message lists."""

    rule = "resolution_fits"


class NoAttemptLeftError(IllegalTransitionError):
    """``resolve(retry)`` on an operation whose attempt budget is used up: a retry would exceed
    it (invariant 2). Fix: resolve ``succeeded``, ``failed`` or ``abandon``."""

    rule = "attempt_left"
