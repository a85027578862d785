"""Lease renewal: a worker renews the lease of every call it has in flight before a third of
it is left, and stops touching an operation whose lease it could not renew (DESIGN §7).

Source: DESIGN §7 ("heartbeat before the lease is a third gone"); docs/adr/0002.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import structlog
from eventsourcing.domain import Aggregate

from executors.commit import Change, Committer, Counts, RefusalNote
from executors.egress import EgressService
from executors.flights import FOLLOW_KINDS
from ledger.config import DEFAULT_LEASE_SECONDS
from ledger.operation import Operation
from ledger.refusals import WriteKind

log = structlog.get_logger("opledger.leases")

RENEW_WHEN_REMAINING = 1 / 3
"""Renew a lease once less than this fraction of it is left (DESIGN §7)."""


@dataclass(frozen=True)
class LeaseConfig:
    """Lease settings.

    Attributes:
        lease_seconds: lease length given at claim and at each renewal, seconds.
        renew_when_remaining: renew once less than this fraction of the lease is left.
    """

    lease_seconds: float = DEFAULT_LEASE_SECONDS
    renew_when_remaining: float = RENEW_WHEN_REMAINING


class LeaseService:
    """Renews the leases of this worker's calls in flight.

    Args:
        committer: the worker's write side.
        egress: whose calls in flight are renewed.
        config: :class:`LeaseConfig`.
    """

    def __init__(self, *, committer: Committer, egress: EgressService, config: LeaseConfig | None = None) -> None:
        self.committer = committer
        self.egress = egress
        self.config = config or LeaseConfig()

    def run_once(self, now: datetime) -> Counts:
        """Renew, in one batch, every lease in flight with less than the threshold left and
        whose call is not past its total deadline (``InFlight.deadline_at``); mark as lost those
        that cannot be renewed (their results will not be recorded).

        Returns:
            :class:`Counts` (``renewed``, ``rejected``).
        """
        counts = Counts()
        self.egress.refresh(self.committer.load)  # after an outage: drop changes never stored
        threshold = self.config.lease_seconds * self.config.renew_when_remaining
        changes: list[tuple[Operation, Change]] = []
        for flight in self.egress.flights():
            if flight.kind in FOLLOW_KINDS:
                continue  # polls and cancels run under a poll lease, renewed by executors.polling
            expires = flight.op.lease_expires_at
            if flight.lost or flight.renewal_refused or expires is None or (expires - now).total_seconds() > threshold:
                continue
            if expires <= now:
                # Too late to renew (the store was unreachable, or this process stalled). The
                # call is not made if it has not been (egress checks the lease first); an outcome
                # already in hand is still recorded unless another worker took over, which the
                # epoch fence decides. Dropping it here would turn a delivered call into
                # recovery's ambiguous worker_lost.
                continue
            deadline = flight.deadline_at
            if deadline is not None and now > deadline:
                # The call outlived its total deadline (a hung adapter): stop renewing, so the
                # lease expires and recovery decides the attempt by its delivery mode.
                if not flight.overdue_logged:
                    log.warning("call past its deadline; lease left to expire", operation_id=str(flight.op.id),
                                deadline_at=deadline.isoformat())
                    flight.overdue_logged = True
                continue
            changes.append((flight.op, self._renew(flight.epoch, now)))
        if not changes:
            return counts
        result = self.committer.commit(changes, counts)
        for op_id, op in result.committed.items():
            self.egress.in_flight[op_id].op = op
        for op_id, reason in result.rejected.items():
            if op_id in result.refused:
                continue
            # Cannot renew: another worker may reclaim it. Stop touching it (DESIGN §7).
            log.warning("lease lost", operation_id=str(op_id), reason=reason)
            self.egress.in_flight[op_id].lost = True
        if result.refused:
            self._refused(result.refused, now, counts)
        return counts

    def _refused(self, refused: dict[UUID, str], now: datetime, counts: Counts) -> None:
        """Renewals the database refused for their operation alone (issue 35): the operation
        records ``WriteRefused`` (``renewal``) under the lease's epoch, so no worker reclaims it
        when the lease lapses (nothing is sent again), and the call's outcome, when it comes, is
        still recorded by this worker; the lease is not renewed again."""
        notes = {}
        for op_id, error in refused.items():
            flight = self.egress.in_flight[op_id]
            flight.renewal_refused = True
            notes[op_id] = RefusalNote(WriteKind.RENEWAL, error, flight.epoch)
        noted = self.committer.record_refusals(notes, now, counts)
        for op_id, op in noted.committed.items():
            self.egress.in_flight[op_id].op = op

    def _renew(self, epoch: int, now: datetime) -> Change:
        def change(op: Operation) -> Sequence[Aggregate]:
            op.renew_lease(epoch=epoch, now=now, lease_seconds=self.config.lease_seconds)
            return []

        return change
