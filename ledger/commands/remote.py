"""The commands of accepted work and callbacks: acceptance, the overdue mark, polled status, authenticated callbacks.

A mixin of ``ledger.operation.Operation``; the rules every command keeps are in ``ledger.commands``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from ledger import decisions
from ledger.callbacks import repeats_progress
from ledger.clock import require_utc
from ledger.commands.base import CommandBase
from ledger.errors import InvalidArgumentError
from ledger.facts import FactKind, storable_fact, storable_fact_or_none
from ledger.modes import Follow
from ledger.status import OUTCOME_STATES, ExecutionState
from ledger.transition_errors import DeadlineNotPassedError, RemoteNotOverdueableError

if TYPE_CHECKING:
    pass

E = ExecutionState


class RemoteCommands(CommandBase):
    """The commands of accepted work and callbacks of the ``Operation`` aggregate."""

    def accept(self, *, epoch: int, now: datetime, attempt_id: UUID, remote_id: str,
               status_code: int | None = None, excerpt: str = "", follow: Follow | str = Follow.WAIT,
               follow_until: datetime | None = None) -> None:
        """Record that the provider accepted the work as remote operation ``remote_id``.

        Args:
            follow: how its result will come (``ledger.modes.how_to_follow``).
            follow_until: the hard limit on waiting for it (UTC), from the declaration's
                ``polling.limit_seconds``; None: the ``accepted`` deadline ends it.

        Raises:
            InvalidArgumentError: an empty ``remote_id``, a ``follow_until`` before ``now``.
        """
        now = require_utc(now)
        self._allow("accept")
        self._fence(epoch)
        self._attempt(attempt_id, "accept")
        if not remote_id:
            raise InvalidArgumentError("remote_id must be non-empty")
        follow = Follow(follow)
        if follow_until is not None and require_utc(follow_until, "follow_until") < now:
            raise InvalidArgumentError("follow_until must not be before now")
        self.trigger_event(self.Accepted, timestamp=now, epoch=epoch, attempt_id=attempt_id,
                           remote_id=storable_fact(remote_id, FactKind.REMOTE_ID), status_code=status_code,
                           excerpt=storable_fact(excerpt, FactKind.EXCERPT), follow=follow.value,
                           follow_until=follow_until)

    def mark_remote_unknown(self, *, now: datetime) -> None:
        """Record that the ``accepted`` deadline passed with the provider still running
        (``RemoteOverdue``): not an outcome. The operation shows as ``remote_unknown`` on the
        attention queue and is followed until ``follow_until``, when ``exceed_deadline``
        records it ambiguous (issue 12 items 2 and 5).

        Raises:
            IllegalTransitionError: not accepted, no hard limit recorded (an acceptance recorded
                before polling existed: its deadline ends it), already overdue, or the deadline
                has not passed at ``now``.
        """
        now = require_utc(now)
        self._allow("mark_remote_unknown")
        if self.follow_until is None or self.remote_overdue:
            raise RemoteNotOverdueableError("mark_remote_unknown", self.execution.value,
                                         "already overdue" if self.remote_overdue else "no hard limit recorded")
        deadline = self.deadline_at
        assert deadline is not None
        if now < deadline:
            raise DeadlineNotPassedError("mark_remote_unknown", self.execution.value,
                                         f"the deadline is {deadline.isoformat()}")
        self.trigger_event(self.RemoteOverdue, timestamp=now, deadline_at=deadline)

    def observe_remote_status(self, *, epoch: int, now: datetime, remote_status: str) -> bool:
        """Record a polled remote status, only when it changed (``RemoteStatusObserved``).

        Returns:
            True when an event was recorded; False when the status was unchanged.
        """
        self._allow("observe_remote_status")
        self._fence(epoch)
        remote_status = storable_fact(remote_status, FactKind.STATUS)
        if remote_status == self.remote_status:
            return False
        self.trigger_event(self.RemoteStatusObserved, timestamp=require_utc(now), epoch=epoch,
                           remote_status=remote_status)
        return True

    def receive_callback(self, *, now: datetime, callback_id: str, outcome: str,
                         remote_status: str | None = None, detail: str = "", attempt_id: UUID | None = None,
                         signed_at: datetime | None = None) -> bool:
        """Record an *authenticated* callback. Authentication is the inbound adapter's job
        (``adapters.http.callbacks``); a duplicate ``callback_id`` changes nothing (invariant 4).

        While the operation waits for its result (dispatching, accepted) the callback is
        recorded as ``CallbackReceived`` and a final outcome ends the operation. Once an outcome
        is recorded, a callback that contradicts it
        (``ledger.decisions.late_callback_contradicts``) is recorded as
        ``LateObservationRecorded``: it never changes the outcome and never settles twice, and
        the operation goes on the attention queue (``late_observation``).

        Args:
            now: UTC-aware instant of receipt.
            callback_id: the callback's ``webhook-id``: the provider's id for the message, the
                same on its retries.
            outcome: ``succeeded``, ``failed`` or ``progress``.
            remote_status: the provider's status word, if any.
            detail: the provider's text for operators.
            attempt_id: the attempt the callback answers; when given it must be the latest.
            signed_at: the callback's ``webhook-timestamp`` (UTC), kept to tell a replayed
                message from a re-signed retry (``ledger.callbacks.classify_callback``).

        Returns:
            True when a fact was recorded; False for a duplicate, a late callback that agrees
            with (or adds nothing to) the recorded outcome, or a ``progress`` report that
            repeats the last one for the same attempt (``ledger.callbacks.repeats_progress``).

        Raises:
            InvalidArgumentError: an unknown outcome.
            IllegalTransitionError: ``attempt_id`` is not the latest attempt, or a state that
                expects no callback (pending, claimed: nothing was sent yet).

        Source: issue 12 item 3; docs/adr/0005-callback-authentication.md.
        """
        if outcome not in ("succeeded", "failed", "progress"):
            raise InvalidArgumentError("outcome must be 'succeeded', 'failed' or 'progress'")
        if callback_id in self.callback_ids:
            return False
        self._attempt(attempt_id, "receive_callback")
        now = require_utc(now)
        signed_at = require_utc(signed_at, "signed_at") if signed_at is not None else None
        if self.execution in OUTCOME_STATES:
            if not decisions.late_callback_contradicts(self.execution, outcome):
                return False
            self.trigger_event(self.LateObservationRecorded, timestamp=now, callback_id=callback_id,
                               attempt_id=attempt_id, signed_at=signed_at, outcome=outcome,
                               remote_status=storable_fact_or_none(remote_status, FactKind.STATUS),
                               detail=storable_fact(detail, FactKind.DETAIL), recorded_outcome=self.execution.value)
            return True
        self._allow("receive_callback")
        status, text = storable_fact_or_none(remote_status, FactKind.STATUS), storable_fact(detail, FactKind.DETAIL)
        if outcome == "progress" and repeats_progress(self.last_progress, (attempt_id, status, text)):
            return False
        self.trigger_event(self.CallbackReceived, timestamp=now, callback_id=callback_id, outcome=outcome,
                           remote_status=status, detail=text, attempt_id=attempt_id, signed_at=signed_at)
        return True
