"""The cancellation and operator commands: request and record a cancellation, a refused write, a resolution.

A mixin of ``ledger.operation.Operation``; the rules every command keeps are in ``ledger.commands``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from ledger import decisions, lifecycle
from ledger.clock import require_utc
from ledger.commands.base import CommandBase
from ledger.errors import IllegalTransitionError, InvalidArgumentError
from ledger.facts import FactKind, storable_fact
from ledger.intents import MAX_EVIDENCE_CHARS, MAX_REASON_CHARS, check_operator_text, require_principal
from ledger.refusals import WriteKind
from ledger.status import ExecutionState
from ledger.transition_errors import (
    AlreadyAbandonedError,
    CancelNotRequestedError,
    LeaseHeldError,
    NoAttemptLeftError,
    NothingToResolveError,
    ResolutionDoesNotFitError,
)

if TYPE_CHECKING:
    pass

E = ExecutionState

RESOLUTIONS_FOR_AMBIGUOUS = ("succeeded", "failed", "retry", "abandon")
RESOLUTIONS_FOR_BLOCKED = ("retry_settlement", "abandon")
RESOLUTIONS_FOR_LATE_OBSERVATION = ("acknowledge",)
"""An operator saw a late observation (``LateObservationRecorded``) and keeps the outcome."""
RESOLUTIONS_FOR_REMOTE_UNKNOWN = ("succeeded", "failed")
"""How an operator may end accepted work past its deadline (attention ``remote_unknown``)."""
RESOLUTIONS_FOR_REFUSED_WRITE = ("retry_write",)
"""An operator fixed what refused a write for the operation (``WriteRefused``, attention
``write_refused``): workers take it again from its recorded state, nothing else changes (issue 35)."""
RESOLUTIONS = tuple(dict.fromkeys(RESOLUTIONS_FOR_AMBIGUOUS + RESOLUTIONS_FOR_BLOCKED + RESOLUTIONS_FOR_LATE_OBSERVATION
                                  + RESOLUTIONS_FOR_REMOTE_UNKNOWN + RESOLUTIONS_FOR_REFUSED_WRITE))
"""Every resolution ``Operation.resolve`` knows, in the order an operator is offered them."""


class OperatorCommands(CommandBase):
    """The cancellation and operator commands of the ``Operation`` aggregate."""

    def request_cancel(self, *, now: datetime, principal: str, reason: str = "") -> bool:
        """Ask for cancellation (``CancelRequested``). Workers honour it before egress, and ask
        the provider to cancel accepted work.

        Returns:
            True when recorded; False when cancellation was already requested.

        Raises:
            InvalidArgumentError: ``reason`` over ``MAX_REASON_CHARS`` (1,000) characters or
                holding NUL or a lone surrogate; a blank principal.
        """
        self._allow("request_cancel")
        require_principal(principal)
        check_operator_text("reason", reason, MAX_REASON_CHARS)
        if self.cancel_requested:
            return False
        self.trigger_event(self.CancelRequested, timestamp=require_utc(now), principal=principal, reason=reason)
        return True

    def cancel(self, *, now: datetime, epoch: int | None = None, reason: str = "") -> None:
        """Record the cancellation (``Cancelled``). Needs a prior ``request_cancel``.

        A leased operation is cancelled by its lease holder (``epoch``); an unleased pending one
        by anyone (``epoch=None``).
        """
        now = require_utc(now)
        self._allow("cancel")
        check_operator_text("reason", reason, MAX_REASON_CHARS)
        if not self.cancel_requested:
            raise CancelNotRequestedError("cancel", self.execution.value, "cancellation was not requested")
        if epoch is None:
            if not (self.execution is E.PENDING or self.lease_expired(now)):
                raise LeaseHeldError("cancel", self.execution.value, "a worker holds the lease")
        else:
            self._fence(epoch)
        self.trigger_event(self.Cancelled, timestamp=now, epoch=epoch, reason=reason or self.cancel_reason or "")

    def cancel_failed(self, *, epoch: int, now: datetime, reason: str) -> None:
        """Record that the provider refused or could not cancel (``CancelFailed``)."""
        self._allow("cancel_failed")
        self._fence(epoch)
        if not self.cancel_requested:
            raise CancelNotRequestedError("cancel_failed", self.execution.value, "cancellation was not requested")
        self.trigger_event(self.CancelFailed, timestamp=require_utc(now), epoch=epoch,
                           reason=storable_fact(reason, FactKind.DETAIL))

    def note_refused_write(self, *, now: datetime, kind: str, error: str, epoch: int | None = None) -> None:
        """Record that the store refused a write for this operation alone (``WriteRefused``):
        workers leave it until an operator acts (attention ``write_refused``).

        Allowed in every state: any write may be refused. A lease holder records it under its
        ``epoch`` (fenced); a worker that holds no lease (a claim, a deadline, a settlement)
        records it with None.

        Args:
            now: UTC-aware instant.
            kind: what the write was for (``ledger.refusals.WriteKind``).
            error: the database's error text (``ledger.refusals.refusal_text``); bounded here too.
            epoch: the lease holder's fencing epoch, or None.

        Raises:
            StaleEpochError: ``epoch`` is not the operation's.
            InvalidArgumentError: ``kind`` is not a ``WriteKind``.

        Source: issue 35 item 2; docs/adr/0002-executor-services.md ("Refused writes").
        """
        if epoch is not None:
            self._fence(epoch)
        try:
            kind = WriteKind(kind).value
        except ValueError:
            raise InvalidArgumentError(f"unknown write kind {kind!r}") from None
        self.trigger_event(self.WriteRefused, timestamp=require_utc(now), kind=kind,
                           error=storable_fact(error, FactKind.DETAIL), epoch=epoch)

    def _resolution_problem(self, resolution: str) -> tuple[type[IllegalTransitionError], str] | None:
        # The rule ``resolve`` enforces, with the error class of the part that refused.
        if self.disposition == "abandoned":
            return AlreadyAbandonedError, "already abandoned"
        allowed: tuple[str, ...]
        if self.execution in lifecycle.RESOLVABLE_EXECUTION:
            allowed = RESOLUTIONS_FOR_AMBIGUOUS
        elif self.execution is E.ACCEPTED and self.remote_overdue:
            # remote_unknown: the operator may say how it ended (issue 12 item 2); the provider
            # may still be running it, so neither retry nor abandon.
            allowed = RESOLUTIONS_FOR_REMOTE_UNKNOWN
        elif self.settlement in lifecycle.RESOLVABLE_SETTLEMENT:
            allowed = RESOLUTIONS_FOR_BLOCKED
        else:
            allowed = ()
        if self.late_observation is not None and self.execution not in lifecycle.RESOLVABLE_EXECUTION:
            allowed += RESOLUTIONS_FOR_LATE_OBSERVATION
        if self.write_refused is not None:
            allowed += RESOLUTIONS_FOR_REFUSED_WRITE
        if not allowed:
            return NothingToResolveError, "nothing to resolve"
        if resolution not in allowed:
            return ResolutionDoesNotFitError, f"resolution must be one of {', '.join(allowed)}"
        if resolution == "retry" and decisions.attempts_left(self) == 0:
            return NoAttemptLeftError, "no attempt left to retry with"
        return None

    def resolution_refusal(self, resolution: str) -> str | None:
        """Why ``resolution`` does not fit the operation now, or None when ``resolve`` may record it.

        The one rule :meth:`resolve` enforces and an operator's tools ask before offering a
        resolution (``ledger.operator_actions``). Pure: reads the aggregate's state only.

        Args:
            resolution: a known resolution (``RESOLUTIONS_FOR_*``).

        Returns:
            None, or the refusal's detail: ``already abandoned``, ``nothing to resolve``,
            ``resolution must be one of ...`` or ``no attempt left to retry with``.

        Source: issue 12 items 2-3; issue 31 item 5 (the console offers only what this allows).
        """
        problem = self._resolution_problem(resolution)
        return None if problem is None else problem[1]

    def resolve(self, *, now: datetime, principal: str, resolution: str, evidence: str) -> None:
        """Record an operator's decision with evidence (``Resolved``).

        Args:
            resolution: for an ambiguous operation ``succeeded``, ``failed``, ``retry`` (the
                operator asserts nothing applied; needs an attempt left) or ``abandon``; for
                accepted work past its deadline (``remote_unknown``) ``succeeded`` or ``failed``;
                for a blocked settlement ``retry_settlement`` or ``abandon``; for a late
                observation (``LateObservationRecorded``) ``acknowledge``, which keeps the
                outcome; for a write the store refused (``WriteRefused``) ``retry_write``, which
                changes nothing but lets workers take the operation again. Every resolution
                clears a late observation and a refused write.
            evidence: what the operator checked (required, shown on the timeline).

        Raises:
            AlreadyAbandonedError, NothingToResolveError, ResolutionDoesNotFitError,
            NoAttemptLeftError (all ``IllegalTransitionError``): as
            :meth:`resolution_refusal` says.
        """
        if not isinstance(evidence, str) or not evidence.strip():
            raise InvalidArgumentError("evidence is required: say what was checked")
        check_operator_text("evidence", evidence, MAX_EVIDENCE_CHARS, required=True)
        require_principal(principal)
        if resolution not in RESOLUTIONS:
            raise InvalidArgumentError(f"unknown resolution {resolution!r}: one of {', '.join(RESOLUTIONS)}")
        problem = self._resolution_problem(resolution)
        if problem is not None:
            raise problem[0]("resolve", self.status.value, problem[1])
        self.trigger_event(self.Resolved, timestamp=require_utc(now), principal=principal,
                           resolution=resolution, evidence=evidence)
