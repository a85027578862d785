"""Polling: following accepted work until the provider answers, and sending remote cancels.

The due-work pass claims accepted work that needs a worker (``ledger.decisions.Poll``) under a
*poll lease* (:attr:`PollingConfig.lease_seconds`, much longer than an attempt's lease) and
hands it here. This service then, per cycle:

1. records the results of polls and cancels that finished, in one fenced batch: a changed
   remote status as ``RemoteStatusObserved`` (an unchanged one records nothing), a terminal
   answer as ``Succeeded``/``Failed``/``Ambiguous`` (``remote_lost``), a confirmed cancel as
   ``Cancelled``, a refused one as ``CancelFailed``;
2. renews the poll leases with less than a third left, in one batch;
3. reloads the operations whose next poll is due (one query: a cancel request, a passed
   deadline or another worker's takeover is seen before asking), and sends their polls, or
   their cancel when one was requested, through egress (its slots and per-host bounds).

The schedule is not in the log: it lives in this worker's memory and is derived again by the
next holder from the last recorded fact (``ledger.polling.first_poll_at``); delays follow
``ledger.polling.poll_delay_seconds``. Every write is fenced by the epoch of the poll
lease's claim, so a worker that lost the lease records nothing.

Source: issue 12 items 2 and 4; docs/adr/0004-accepted-work.md.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

import structlog
from eventsourcing.domain import Aggregate

from executors.commit import Change, Committer, Counts, RefusalNote
from executors.egress import EgressService
from executors.flights import Finished, InFlight, target_host
from executors.outcomes import UNSTORABLE
from executors.settlement import SettlementService
from ledger.config import DEFAULT_POLL_LEASE_SECONDS
from ledger.decisions import needs_follower
from ledger.declarations import Integration
from ledger.egress import Adapter, EgressRequest, can_follow
from ledger.errors import UnknownIntegrationError
from ledger.operation import Operation
from ledger.outcomes import Ambiguous, CancelConfirmed, CancelRefused, Failed, FailureCategory, StillRunning, Succeeded
from ledger.polling import first_poll_at, poll_delay_seconds
from ledger.refusals import WriteKind
from ledger.status import ExecutionState as E

log = structlog.get_logger("opledger.polling")

# How long a poll lease holds accepted work, seconds: a worker killed mid-poll leaves it this
# long at most before another resumes it. Renewed with a third left, so a day of polling records
# about 430 renewals at most, whatever the poll rate (ADR 0004).
RENEW_WHEN_REMAINING = 1 / 3
"""Renew a poll lease once less than this fraction of it is left."""
DEFAULT_MAX_HELD = 10_000
"""Accepted operations one worker follows at most; the rest wait for other workers."""


@dataclass(frozen=True)
class PollingConfig:
    """Polling settings (the poll *schedule* is declared per integration: ``Integration.polling``).

    Attributes:
        worker_id: recorded on the poll lease's ``Claimed``.
        lease_seconds: poll lease length, seconds.
        renew_when_remaining: renew once less than this fraction of the lease is left.
        max_held: accepted operations this worker follows at most.
    """

    worker_id: str
    lease_seconds: float = DEFAULT_POLL_LEASE_SECONDS
    renew_when_remaining: float = RENEW_WHEN_REMAINING
    max_held: int = DEFAULT_MAX_HELD


@dataclass
class _Held:
    """Accepted work this worker holds a poll lease on."""

    op: Operation
    epoch: int
    declaration: Integration
    adapter: Adapter
    next_at: datetime
    polls: int = 0  # polls since the remote status last changed
    hint: float | None = None
    in_flight: bool = False
    results: list[Finished] = field(default_factory=list)


class PollingService:
    """Follows accepted operations this worker claimed for polling.

    Args:
        committer: the worker's write side.
        egress: where polls and cancels go (and come back from, through the outcome service).
        settlement: receives operations whose outcome a poll recorded.
        adapters: adapter name (as declared) to adapter.
        rng: random source for the poll jitter.
        config: :class:`PollingConfig`.
        stopping: set when the worker stops taking work: no new poll or cancel is sent then
            (results of those in flight are still recorded; the leases lapse for the next worker).
    """

    def __init__(self, *, committer: Committer, egress: EgressService, settlement: SettlementService,
                 adapters: Mapping[str, Adapter], rng: random.Random, config: PollingConfig,
                 stopping: threading.Event | None = None) -> None:
        self.stopping = stopping or threading.Event()
        self.committer = committer
        self.egress = egress
        self.settlement = settlement
        self.adapters = dict(adapters)
        self.rng = rng
        self.config = config
        self.held: dict[UUID, _Held] = {}
        self._stale = False  # a commit failed mid-way (an outage): reload every held operation

    # ------------------------------------------------------------------ taking work

    def room(self) -> int:
        """How many more accepted operations this worker may take."""
        return self.config.max_held - len(self.held)

    def claim_change(self, now: datetime) -> Change:
        """The change that claims accepted work under a poll lease (``Claimed``, new epoch).

        Raises (rejecting the change): ``UnknownIntegrationError`` when this worker has no
        declaration for it, ``LedgerError`` when the claim is not allowed.
        """

        def change(op: Operation) -> Sequence[Aggregate]:
            self.committer.app.registry.get(op.integration_name, op.integration_version)
            op.claim(now=now, worker_id=self.config.worker_id, lease_seconds=self.config.lease_seconds)
            return []

        return change

    def hold(self, op: Operation, now: datetime) -> None:
        """Follow ``op``, whose poll lease claim just committed: its first poll is derived from
        the last recorded fact (``ledger.polling.first_poll_at``)."""
        try:
            declaration = self.committer.app.registry.get(op.integration_name, op.integration_version)
        except UnknownIntegrationError:
            return  # claim_change checked it; a registry changed since is left to the lease
        adapter = self.adapters.get(declaration.adapter)
        if adapter is None:
            self.committer.report(op.id, "cannot_poll", f"no adapter {declaration.adapter!r} in this worker")
            return
        first = first_poll_at(polling=declaration.polling, last_fact_at=op.state_entered_at, now=now)
        self.held[op.id] = _Held(op=op, epoch=op.epoch, declaration=declaration, adapter=adapter, next_at=first)

    def receive(self, finished: list[tuple[InFlight, Finished]]) -> None:
        """Take the results of polls and cancels (from the outcome service); recorded by the
        next :meth:`run_once`."""
        for flight, item in finished:
            held = self.held.get(item.operation_id)
            if held is None or held.epoch != flight.epoch:
                continue  # no longer ours
            held.in_flight = False
            held.results.append(item)

    # ------------------------------------------------------------------ the cycle

    def run_once(self, now: datetime) -> Counts:
        """Record finished polls and cancels, renew poll leases, send the polls now due.

        Returns:
            :class:`Counts` of what was committed (``polls``: polls and cancels sent).
        """
        counts = Counts()
        if self._stale:
            self._reload(list(self.held))
            self._stale = False
        try:
            self._record(now, counts)
            self._renew(now, counts)
        except BaseException:
            self._stale = True  # what the failed commit applied in memory was never stored
            raise
        self._send_due(now, counts)
        return counts

    def _record(self, now: datetime, counts: Counts) -> None:
        ready = [held for held in self.held.values() if held.results]
        changes: list[tuple[Operation, Change]] = []
        taken: list[tuple[_Held, list[Finished]]] = []
        for held in ready:
            results, held.results = held.results, []
            taken.append((held, results))
            result = results[-1].outcome  # one call in flight at a time: one result
            held.next_at = self._schedule(held, result, now)
            if (change := self._change_for(held, result, now)) is not None:
                changes.append((held.op, change))
        if not changes:
            return
        try:
            outcome = self.committer.commit(changes, counts)
        except BaseException:
            for held, results in taken:  # the store did not take them (an outage): recorded next cycle
                held.results[:0] = results
            raise
        for op_id, op in outcome.committed.items():
            held = self.held[op_id]
            held.op = op
            if op.execution is not E.ACCEPTED:
                del self.held[op_id]
                self.settlement.offer(op)
        if outcome.refused:
            self._refused(outcome.refused, {held.op.id: results[-1].outcome for held, results in taken}, now,
                          counts)
        for op_id, reason in outcome.rejected.items():
            if op_id not in outcome.refused:
                log.info("poll result not recorded; the operation is no longer ours", operation_id=str(op_id),
                         reason=reason)
            self.held.pop(op_id, None)

    def _refused(self, refused: dict[UUID, str], results: dict[UUID, object], now: datetime,
                 counts: Counts) -> None:
        """Poll results the database refused for their operation alone (issue 35): the
        operation records ``WriteRefused`` (``poll``) under the poll lease's epoch, after
        ``Ambiguous`` (``outcome_unstorable``) when the result was an ending (the remote work may
        have happened and what the provider said cannot be kept); it is no longer followed and
        waits for an operator."""
        notes = {}
        for op_id, error in refused.items():
            held = self.held.get(op_id)
            if held is None:
                continue
            ending = isinstance(results.get(op_id), (Succeeded, Failed, Ambiguous, CancelConfirmed))
            notes[op_id] = RefusalNote(WriteKind.POLL, error, held.epoch, _unstorable(held.epoch, error, now)
                                       if ending else None)
        self.committer.record_refusals(notes, now, counts)

    def _schedule(self, held: _Held, result: object, now: datetime) -> datetime:
        changed = isinstance(result, StillRunning) and result.remote_status not in (None, held.op.remote_status)
        held.polls = 0 if changed else held.polls + 1
        held.hint = result.next_check_after if isinstance(result, StillRunning) else None
        delay = poll_delay_seconds(polling=held.declaration.polling, polls=held.polls,
                                   overdue=held.op.remote_overdue, hint=held.hint, rng=self.rng)
        return now + timedelta(seconds=delay)

    def _change_for(self, held: _Held, result: object, now: datetime) -> Change | None:
        """The fenced change recording ``result``, or None when there is nothing to record."""
        epoch = held.epoch
        if result is None:
            return None  # the call was not made (its lease lapsed): nothing learned
        if isinstance(result, StillRunning):
            if result.remote_status is None or result.remote_status == held.op.remote_status:
                return None  # unchanged: nothing recorded (the history stays small)
            status = result.remote_status

            def observe(op: Operation) -> Sequence[Aggregate]:
                op.observe_remote_status(epoch=epoch, now=now, remote_status=status)
                return []

            return observe
        if isinstance(result, CancelRefused) and result.retryable:
            return None  # the cancel call failed: asked again at the next poll

        def record(op: Operation) -> Sequence[Aggregate]:
            record_result(op, epoch, result, now)
            return []

        return record

    def _renew(self, now: datetime, counts: Counts) -> None:
        threshold = self.config.lease_seconds * self.config.renew_when_remaining
        changes: list[tuple[Operation, Change]] = []
        for held in self.held.values():
            expires = held.op.lease_expires_at
            if expires is None or (expires - now).total_seconds() > threshold:
                continue
            epoch = held.epoch

            def renew(op: Operation, epoch: int = epoch) -> Sequence[Aggregate]:
                op.renew_lease(epoch=epoch, now=now, lease_seconds=self.config.lease_seconds)
                return []

            changes.append((held.op, renew))
        if not changes:
            return
        result = self.committer.commit(changes, counts)
        for op_id, op in result.committed.items():
            self.held[op_id].op = op
        if result.refused:  # issue 35: the operation says so and waits for an operator
            self.committer.record_refusals({op_id: RefusalNote(WriteKind.RENEWAL, error, self.held[op_id].epoch)
                                            for op_id, error in result.refused.items()}, now, counts)
        for op_id, reason in result.rejected.items():
            if op_id not in result.refused:
                log.warning("poll lease lost", operation_id=str(op_id), reason=reason)
            self.held.pop(op_id, None)

    def _send_due(self, now: datetime, counts: Counts) -> None:
        if self.stopping.is_set():
            return
        due = [held for held in self.held.values() if not held.in_flight and held.next_at <= now]
        if not due:
            return
        # Fresh state first: a cancel request, a passed deadline or a takeover by another worker
        # is seen before the provider is asked (one query for the batch).
        self._reload([held.op.id for held in due])
        for held in due:
            op_id = held.op.id
            if op_id not in self.held:
                continue
            op = held.op
            if self.egress.room(held.adapter, target_host(op.target)) <= 0:
                continue  # stays due; asked when a slot (or a thread) frees
            if op.cancel_requested and not op.cancel_refused and not can_follow(held.adapter):
                # Nothing can ask this provider to cancel: say so once (CancelFailed), then the
                # operation waits for its callback or its deadline.
                held.results.append(Finished(op_id, CancelRefused(
                    reason=f"the {held.declaration.adapter!r} adapter cannot cancel remote operations")))
                continue
            if op.cancel_requested and not op.cancel_refused:
                kind = "cancel"
            elif needs_follower(op) and can_follow(held.adapter):
                kind = "poll"
            else:
                # Nothing left for a holder to do (a cancel that was refused on work a callback
                # completes, an adapter that cannot poll): let the lease lapse.
                del self.held[op_id]
                continue
            held.in_flight = True
            counts.polls += 1
            self.egress.submit(InFlight(op=op, epoch=held.epoch, kind=kind, request=_request(op, held.declaration),
                                        policy=held.declaration.retry, adapter=held.adapter, started_at=now))

    def _reload(self, ids: list[UUID]) -> None:
        fresh = self.committer.load(ids)
        for op_id in ids:
            held = self.held.get(op_id)
            if held is None:
                continue
            op = fresh.get(op_id)
            if op is None or op.epoch != held.epoch or op.execution is not E.ACCEPTED:
                # Taken over, ended by someone else (a deadline, a callback, an operator), or
                # unloadable (the projection shows it): stop following it.
                del self.held[op_id]
                if op is not None and op.execution is not E.ACCEPTED:
                    self.settlement.offer(op)
                continue
            held.op = op


def _unstorable(epoch: int, error: str, now: datetime) -> Callable[[Operation], object]:
    """The fact a refused ending leaves: ``Ambiguous`` (``outcome_unstorable``) with the error."""

    def fact(op: Operation) -> None:
        op.mark_ambiguous(epoch=epoch, now=now, attempt_id=op.last_attempt_id, reason=UNSTORABLE,
                          detail=f"the poll's result could not be stored: {error}")

    return fact


def record_result(op: Operation, epoch: int, result: object, now: datetime) -> None:
    """Record a poll's terminal answer or a cancel's answer on ``op`` under ``epoch`` (UTC
    ``now``): ``Succeeded``, ``Failed`` (``remote_failed``), ``Ambiguous`` (``remote_lost``),
    ``Cancelled`` (a confirmed cancel we asked for; one we did not ask for is a remote failure),
    or ``CancelFailed``.

    Raises:
        LedgerError: a stale epoch or a transition the lifecycle refuses (the change is rejected).
    """
    attempt = op.last_attempt_id
    if isinstance(result, Succeeded):
        op.succeed(epoch=epoch, now=now, attempt_id=attempt, status_code=result.status_code,
                   excerpt=result.excerpt)
    elif isinstance(result, Failed):
        op.fail(epoch=epoch, now=now, attempt_id=attempt, category=FailureCategory.REMOTE_FAILED,
                retryable=False, status_code=result.status_code, detail=result.detail)
    elif isinstance(result, Ambiguous):
        op.mark_ambiguous(epoch=epoch, now=now, attempt_id=attempt, reason=result.reason,
                          status_code=result.status_code, detail=result.detail)
    elif isinstance(result, CancelConfirmed) and op.cancel_requested:
        op.cancel(now=now, epoch=epoch, reason=op.cancel_reason or "cancelled by the provider")
    elif isinstance(result, CancelConfirmed):
        # Cancelled by someone else at the provider: the effect did not happen as asked.
        op.fail(epoch=epoch, now=now, attempt_id=attempt, category=FailureCategory.REMOTE_FAILED,
                retryable=False, detail=f"cancelled at the provider, not by us: {result.detail}")
    elif isinstance(result, CancelRefused):
        op.cancel_failed(epoch=epoch, now=now, reason=result.reason)


def _request(op: Operation, declaration: Integration) -> EgressRequest:
    """The request a poll or cancel of ``op`` is made with: its latest attempt, no payload."""
    assert op.last_attempt_id is not None
    return EgressRequest(
        operation_id=op.id, attempt_id=op.last_attempt_id, attempt_number=op.attempts,
        integration=op.integration_name, delivery_mode=op.delivery_mode, target=op.target, payload={},
        traceparent=op.traceparent, timeout_seconds=declaration.request_timeout_seconds, tenant=op.tenant,
    )
