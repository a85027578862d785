"""The claim and lease commands: claim under a new epoch, refuse a drifted declaration, wait for a call budget, renew.

A mixin of ``ledger.operation.Operation``; the rules every command keeps are in ``ledger.commands``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from ledger import decisions
from ledger.approvals import void_reason
from ledger.clock import require_utc
from ledger.commands.base import CommandBase
from ledger.errors import InvalidArgumentError, LeaseExpiredError
from ledger.status import ExecutionState
from ledger.time_limits import require_later
from ledger.transition_errors import (
    ApprovalVoidError,
    AwaitingApprovalError,
    BudgetWaitNotOverError,
    DigestNotMismatchedError,
    LeaseHeldError,
    NotDueError,
    NotLeasedError,
    WaitNotLaterError,
)

if TYPE_CHECKING:
    pass

E = ExecutionState


class LeaseCommands(CommandBase):
    """The claim and lease commands of the ``Operation`` aggregate."""

    def claim(self, *, now: datetime, worker_id: str, lease_seconds: float) -> int:
        """Take the operation under a lease with a new fencing epoch (``Claimed``).

        A pending operation is claimable once due and approved; a claimed, dispatching or
        accepted one only after its lease expired (recovery takes it over).

        Args:
            now: UTC-aware instant.
            worker_id: the claiming worker's id.
            lease_seconds: lease length in seconds (> 0).

        Returns:
            The new epoch (previous + 1): the worker's fencing token.

        Raises:
            IllegalTransitionError: terminal or ambiguous, not due, awaiting approval, the
                current lease is still live, or a recorded call budget wait is not over.
        """
        now = require_utc(now)
        self._allow("claim")
        if lease_seconds <= 0:
            raise InvalidArgumentError("lease_seconds must be > 0")
        takeover = False
        at = decisions.claimable_at(self)  # the rule due_work follows, asked rather than restated
        if self.execution is E.PENDING:
            if at is None:
                raise AwaitingApprovalError("claim", "pending", "awaiting approval")
            voided = void_reason(self, now)
            if voided is not None:
                raise ApprovalVoidError("claim", "pending", f"{voided}: void it and wait for a new approval")
            if now < at:
                raise NotDueError("claim", "pending", f"not due until {at.isoformat()}")
        else:
            if at is not None and now < at:
                if not self.lease_expired(now):
                    raise LeaseHeldError("claim", self.execution.value, "the lease is still held")
                raise BudgetWaitNotOverError("claim", self.execution.value,
                                             f"waits for a call budget until {at.isoformat()}")
            # A lease that lapsed is taken over; none (accepted work, or a lease its holder gave
            # up with a budget wait) is not.
            takeover = self.lease_expires_at is not None
        epoch = self.epoch + 1
        require_later(now, self.deadlines[E.CLAIMED.value], "deadlines.claimed")
        self.trigger_event(
            self.Claimed, timestamp=now, epoch=epoch, worker_id=worker_id,
            lease_expires_at=require_later(now, lease_seconds, "lease_seconds"), takeover=takeover,
        )
        return epoch

    def flag_declaration_mismatch(self, *, now: datetime, worker_id: str, declared_digest: str) -> bool:
        """Record that a worker refused the operation because its declaration of the same name
        and version has digest ``declared_digest``, not the recorded ``integration_digest``
        (``DeclarationMismatched``). The operation is on the attention queue as
        ``declaration_mismatch`` until a worker with the recorded declaration claims it; it is
        never executed under other rules.

        Returns:
            True when recorded; False when this mismatch is already the recorded one.

        Raises:
            IllegalTransitionError: not active, or ``declared_digest`` is the recorded digest.

        Source: issue 14 item 5.
        """
        self._allow("flag_declaration_mismatch")
        if declared_digest == self.integration_digest:
            raise DigestNotMismatchedError("flag_declaration_mismatch", self.execution.value,
                                         "the declared digest is the recorded one")
        if self.declaration_mismatch == declared_digest:
            return False
        self.trigger_event(self.DeclarationMismatched, timestamp=require_utc(now), worker_id=worker_id,
                           declared_digest=declared_digest)
        return True

    def wait_for_budget(self, *, now: datetime, scope: str, until: datetime, epoch: int | None = None) -> None:
        """Record that call budget ``scope`` is used up until ``until`` (``BudgetWaited``): the
        operation is due again then, in the state it is in. Not a failure (issue 14 item 1).

        Two ways, and never a lease the recorder does not hold:

        - ``epoch=None``, by whoever finds the operation due and its call not fitting: a
          pending operation once due, or a claimed or dispatching one whose lease lapsed (the
          reclaim records the wait instead of claiming; the lapsed lease, its epoch and its
          takeover are left as they are).
        - ``epoch`` given, by the live lease holder of a claimed or dispatching operation (a
          lookup after a lost response that cannot get a call): it gives up its lease with
          the wait, so the worker that takes it at ``until`` does not count a takeover.

        Each way needs the operation due (or held), so a wait is recorded once per window: a
        second worker finding the same window used up meets a wait already recorded.

        Args:
            now: UTC-aware instant.
            scope: the limiting level's scope key (``ledger.budgets.limiting_level``).
            until: the end of that level's window, UTC, after ``now``.
            epoch: the holder's fencing epoch, or None for an unleased wait.

        Raises:
            IllegalTransitionError: not pending, claimed or dispatching; ``until`` not after
                ``now``; unleased: not due yet (pending before ``due_at``, the lease still held,
                or a recorded wait not over); with an epoch: the operation is pending.
            StaleEpochError, LeaseExpiredError: with an epoch that is not the holder's live one.

        Source: issue 14 item 1; docs/adr/0001-operation-lifecycle.md (``wait_for_budget``).
        """
        now = require_utc(now)
        self._allow("wait_for_budget")
        until = require_utc(until, "until")
        state = self.execution.value
        if until <= now:
            raise WaitNotLaterError("wait_for_budget", state, "the next window must be later")
        if epoch is not None:
            if self.execution is E.PENDING:
                raise NotLeasedError("wait_for_budget", state, "a pending operation is not leased: "
                                             "record its wait without an epoch")
            self._fence(epoch)
            if self.lease_expired(now):
                raise LeaseExpiredError(f"operation {self.id}: lease expired at {self.lease_expires_at}")
        elif self.execution is E.PENDING:
            if now < self.due_at:
                raise NotDueError("wait_for_budget", state, f"not due until {self.due_at.isoformat()}")
        elif not self.lease_expired(now):
            raise LeaseHeldError("wait_for_budget", state, "the lease is still held: its holder records "
                                         "the wait, with its epoch")
        elif self.budget_wait_until is not None and now < self.budget_wait_until:
            raise BudgetWaitNotOverError("wait_for_budget", state,
                                         f"already waits until {self.budget_wait_until.isoformat()}")
        self.trigger_event(self.BudgetWaited, timestamp=now, scope=scope, until=until, epoch=epoch)

    def renew_lease(self, *, epoch: int, now: datetime, lease_seconds: float) -> None:
        """Extend the lease (``LeaseRenewed``). A lease that already ran out cannot be renewed:
        the worker must stop before egress (DESIGN §7).

        Raises:
            StaleEpochError, LeaseExpiredError, IllegalTransitionError.
        """
        now = require_utc(now)
        self._allow("renew_lease")
        self._fence(epoch)
        if lease_seconds <= 0:
            raise InvalidArgumentError("lease_seconds must be > 0")
        if self.lease_expired(now):
            raise LeaseExpiredError(f"operation {self.id}: lease expired at {self.lease_expires_at}")
        self.trigger_event(self.LeaseRenewed, timestamp=now, epoch=epoch,
                           lease_expires_at=require_later(now, lease_seconds, "lease_seconds"))
