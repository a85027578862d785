"""Recording outcomes: each finished call's result becomes the fact the delivery mode allows,
in one fenced batch per cycle (DESIGN §5; ``ledger.decisions.decide``).

An outcome that cannot be stored as received is recorded as ``Ambiguous`` with reason
``outcome_unstorable`` and the error, so the operation goes to the attention queue and every
other outcome of the batch commits. A lookup decision sends the lookup and records nothing yet;
a lookup is a request to the provider, so it takes a call from every call budget that applies in
that same commit (``executors.budgets``). When one has none left, no lookup is sent: the lease
holder records ``BudgetWaited`` (the limiting level, until its window ends) under its epoch and
gives up its lease with it, and the worker that takes the operation then looks it up under the
same budgets.

Source: DESIGN §5, §7; docs/adr/0002-executor-services.md.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import structlog
from eventsourcing.domain import Aggregate

from executors.budgets import budget_of, take_calls
from executors.commit import Change, CommitResult, Committer, Counts, RefusalNote
from executors.egress import EgressService
from executors.flights import FOLLOW_KINDS, Finished, InFlight
from executors.settlement import CoSettlement, SettlementService
from ledger.application import LedgerApplication
from ledger.budgets import CallWindow, LevelWindow
from ledger.decisions import AwaitCallback, Decision, GiveUp, Lookup, Record, Retry, after_lookup, decide
from ledger.egress import Adapter, can_follow
from ledger.errors import UnknownIntegrationError
from ledger.modes import Follow, how_to_follow, rules_for
from ledger.operation import Operation
from ledger.outcomes import (
    Accepted,
    Ambiguous,
    CancelConfirmed,
    CancelRefused,
    Failed,
    Outcome,
    StillRunning,
    Succeeded,
)
from ledger.refusals import WriteKind
from ledger.time_limits import later

FOLLOW_RESULTS = (StillRunning, CancelConfirmed, CancelRefused)
"""Results of polls and cancels: recorded by ``executors.polling``, never here."""

log = structlog.get_logger("opledger.outcomes")

UNSTORABLE = "outcome_unstorable"
"""Ambiguity reason of an outcome the store refused (the effect may have happened)."""


@dataclass(frozen=True)
class OutcomeConfig:
    """Outcome recording has no settings yet; the frozen record keeps the services' shape."""


@dataclass(frozen=True, slots=True)
class AcceptTerms:
    """How accepted work will be followed, known only where the adapter is: whether it can
    poll, and the declared hard limit (``polling.limit_seconds``, None when undeclared)."""

    adapter_polls: bool = False
    limit_seconds: float | None = None

    def follow(self, op: Operation) -> Follow:
        """``ledger.modes.how_to_follow`` for ``op``'s delivery mode."""
        return how_to_follow(op.delivery_mode, adapter_polls=self.adapter_polls)

    def until(self, now: datetime) -> datetime | None:
        """The hard limit for work accepted at ``now`` (UTC), or None."""
        return None if self.limit_seconds is None else later(now, self.limit_seconds)


def terms_of(app: LedgerApplication, op: Operation, adapter: Adapter | None) -> AcceptTerms:
    """The :class:`AcceptTerms` of ``op`` under ``adapter`` (its declaration read from ``app``)."""
    try:
        limit: float | None = app.registry.get(op.integration_name, op.integration_version).polling.limit_seconds
    except UnknownIntegrationError:
        limit = None
    return AcceptTerms(adapter_polls=can_follow(adapter), limit_seconds=limit)


def apply_decision(op: Operation, epoch: int, decision: Decision, now: datetime,
                   terms: AcceptTerms = AcceptTerms()) -> None:
    """Record ``decision`` for ``op``'s latest attempt as the matching command.

    Args:
        op: the operation (dispatching, under ``epoch``).
        epoch: the fencing epoch the attempt ran under.
        decision: from ``ledger.decisions``; ``Lookup`` records nothing (the caller sends it).
        now: UTC-aware instant.
        terms: how accepted work is followed (recorded on ``Accepted``).

    Raises:
        LedgerError: stale epoch, illegal transition (the change is rejected, nothing recorded).
    """
    attempt_id = op.last_attempt_id
    if isinstance(decision, Retry):
        assert attempt_id is not None
        op.schedule_retry(epoch=epoch, now=now, attempt_id=attempt_id, retry_at=decision.at,
                          category=decision.category, reason=decision.reason,
                          possibly_applied=decision.possibly_applied, status_code=decision.status_code,
                          detail=decision.detail)
    elif isinstance(decision, GiveUp):
        op.exhaust_budget(epoch=epoch, now=now, last_attempt_possibly_applied=decision.last_attempt_possibly_applied,
                          status_code=decision.status_code, detail=decision.detail)
    elif isinstance(decision, AwaitCallback):
        assert attempt_id is not None
        op.accept(epoch=epoch, now=now, attempt_id=attempt_id, remote_id=str(op.id),
                  excerpt=f"response lost ({decision.reason}); waiting for the provider's callback",
                  follow=terms.follow(op), follow_until=terms.until(now))
    elif isinstance(decision, Record):
        record_outcome(op, epoch, attempt_id, decision.outcome, now, terms)


def record_outcome(op: Operation, epoch: int, attempt_id: UUID | None, outcome: Outcome, now: datetime,
                   terms: AcceptTerms = AcceptTerms()) -> None:
    """Record an outcome value as the matching fact; a success in a mode whose success only
    means accepted (``ledger.modes``: ``callback``) is recorded as ``Accepted``, with how it
    is followed (``terms``)."""
    if isinstance(outcome, Succeeded):
        if rules_for(op.delivery_mode).success_means_accepted:
            assert attempt_id is not None
            op.accept(epoch=epoch, now=now, attempt_id=attempt_id, remote_id=outcome.remote_id or str(op.id),
                      status_code=outcome.status_code, excerpt=outcome.excerpt, follow=terms.follow(op),
                      follow_until=terms.until(now))
        else:
            op.succeed(epoch=epoch, now=now, attempt_id=attempt_id, status_code=outcome.status_code,
                       remote_id=outcome.remote_id, excerpt=outcome.excerpt)
    elif isinstance(outcome, Accepted):
        assert attempt_id is not None
        op.accept(epoch=epoch, now=now, attempt_id=attempt_id, remote_id=outcome.remote_id,
                  status_code=outcome.status_code, excerpt=outcome.excerpt, follow=terms.follow(op),
                  follow_until=terms.until(now))
    elif isinstance(outcome, Failed):
        op.fail(epoch=epoch, now=now, attempt_id=attempt_id, category=outcome.category,
                retryable=outcome.retryable, status_code=outcome.status_code, detail=outcome.detail)
    elif isinstance(outcome, Ambiguous):
        op.mark_ambiguous(epoch=epoch, now=now, attempt_id=attempt_id, reason=outcome.reason,
                          status_code=outcome.status_code, detail=outcome.detail)
    else:
        raise TypeError(f"not an outcome: {outcome!r}")


class OutcomeService:
    """Records the results of finished calls.

    Args:
        committer: the worker's write side.
        egress: where finished calls come from (and lookups go).
        settlement: receives operations whose outcome now awaits settlement.
        rng: random source for retry jitter.
        config: :class:`OutcomeConfig`.
        follow: receives the results of polls and remote cancels (``executors.polling``);
            without it they are dropped (logged).
    """

    def __init__(self, *, committer: Committer, egress: EgressService, settlement: SettlementService,
                 rng: random.Random, config: OutcomeConfig | None = None,
                 follow: Callable[[list[tuple[InFlight, Finished]]], None] | None = None) -> None:
        self.committer = committer
        self.egress = egress
        self.settlement = settlement
        self.rng = rng
        self.config = config or OutcomeConfig()
        self.follow = follow

    def run_once(self, now: datetime) -> Counts:
        """Record every call finished since the last cycle, in one batch.

        Returns:
            :class:`Counts` of what was committed.
        """
        counts = Counts()
        self.egress.refresh(self.committer.load)  # after an outage: drop changes never stored
        finished = self._take()
        if not finished:
            return counts
        lookups: dict[UUID, tuple[InFlight, datetime | None]] = {}
        waits: dict[UUID, LevelWindow] = {}
        windows: dict[str, CallWindow] = {}  # call budget windows of this batch
        flights = {flight.op.id: (flight, item) for flight, item in finished}
        try:
            # Outcomes that may end the operation settle in the same commit (``co_settle``,
            # which loads their entities: it fails in an outage as the commit does).
            settle = self.settlement.co_settle(
                [flight.op for flight, item in finished if not isinstance(item.outcome, Accepted)], now)
            result = self.committer.commit(
                [(flight.op, self._change(flight, item, now, lookups, waits, windows, settle))
                 for flight, item in finished], counts)
        except BaseException:
            # The store did not take the batch (an outage, or this process stopping): keep the
            # outcomes in hand for the next cycle rather than let recovery call them lost.
            self.egress.put_back(finished)
            raise
        if entity_failed := [op_id for op_id in result.failed if op_id in settle.entity_saved]:
            self._record_alone(entity_failed, flights, result, now, lookups, waits, windows, counts)
        for op_id, reason in result.rejected.items():
            if op_id not in result.failed:
                log.info("outcome rejected (fenced)", operation_id=str(op_id), reason=reason)
        for op_id, op in result.committed.items():
            if op_id in lookups:
                flight, send_by = lookups[op_id]
                self.egress.submit(InFlight(op=op, epoch=flight.epoch, kind="lookup", request=flight.request,
                                            policy=flight.policy, adapter=flight.adapter, started_at=now,
                                            send_by=send_by))
            elif op_id in waits:
                limiting = waits[op_id]
                log.info("lookup waits for a call budget (BudgetWaited); the lease is given up and the operation is "
                         "looked up when the window ends", operation_id=str(op_id), scope=limiting.level.scope,
                         level=limiting.level.level.value, until=limiting.end.isoformat())
            else:
                self.settlement.offer(op)
        if result.failed:
            self._record_unstorable(result, flights, now, counts)
        return counts

    def _take(self) -> list[tuple[InFlight, Finished]]:
        """The attempts' finished calls; polls' and cancels' results go to ``follow``."""
        finished = self.egress.take_finished()
        followed = [pair for pair in finished if pair[0].kind in FOLLOW_KINDS]
        if not followed:
            return finished
        if self.follow is not None:
            self.follow(followed)
        else:
            log.warning("poll results dropped: no polling service", count=len(followed))
        return [pair for pair in finished if pair[0].kind not in FOLLOW_KINDS]

    def _record_alone(self, ids: list[UUID], flights: dict[UUID, tuple[InFlight, Finished]], result: CommitResult,
                      now: datetime, lookups: dict[UUID, tuple[InFlight, datetime | None]],
                      waits: dict[UUID, LevelWindow], windows: dict[str, CallWindow], counts: Counts) -> None:
        """Record the outcomes of ``ids`` without their settlement, into ``result``: their
        co-settled commit failed, and what could not be stored may be the entity's change, not
        the outcome. Their settlement pass then records its own trouble."""
        try:
            alone = self.committer.commit(
                [(op, self._change(*flights[op.id], now, lookups, waits, windows))
                 for op in self.committer.load(ids).values()], counts)
        except BaseException:
            self.egress.put_back([flights[op_id] for op_id in ids])  # as in ``run_once``
            raise
        for op_id, op in alone.committed.items():
            del result.failed[op_id], result.rejected[op_id]
            result.refused.pop(op_id, None)  # what was refused was the settlement: its pass says so
            result.committed[op_id] = op

    def _change(self, flight: InFlight, item: Finished, now: datetime,
                lookups: dict[UUID, tuple[InFlight, datetime | None]], waits: dict[UUID, LevelWindow],
                windows: dict[str, CallWindow],
                settle: CoSettlement | None = None) -> Change:
        def change(op: Operation) -> Sequence[Aggregate]:
            lookups.pop(op.id, None)
            waits.pop(op.id, None)
            if flight.kind == "lookup":
                assert not isinstance(item.outcome, FOLLOW_RESULTS)
                decision = after_lookup(found=item.outcome, policy=flight.policy, attempts=op.attempts,
                                        now=now, rng=self.rng)
            else:
                assert item.outcome is not None and not isinstance(item.outcome, FOLLOW_RESULTS)
                decision = decide(outcome=item.outcome, mode=op.delivery_mode, policy=flight.policy,
                                  attempts=op.attempts, now=now, rng=self.rng)
            if isinstance(decision, Lookup):
                return self._lookup(op, flight, now, lookups, waits, windows)
            apply_decision(op, flight.epoch, decision, now, terms_of(self.committer.app, op, flight.adapter))
            return [] if settle is None else settle(op)

        return change

    def _lookup(self, op: Operation, flight: InFlight, now: datetime,
                lookups: dict[UUID, tuple[InFlight, datetime | None]], waits: dict[UUID, LevelWindow],
                windows: dict[str, CallWindow]) -> Sequence[Aggregate]:
        """Plan ``op``'s lookup, taking a call from each budget level in this commit (the
        windows returned are saved with it), or, when one is used up, record the wait for the
        limiting level under ``flight.epoch`` (``Operation.wait_for_budget``: the holder gives
        up its lease; a holder whose lease already lapsed is refused, and the reclaim records
        the wait instead)."""
        app = self.committer.app
        budget = budget_of(app.registry.get(op.integration_name, op.integration_version), op.tenant, now,
                           app.global_budget)
        if budget is None:
            lookups[op.id] = (flight, None)
            return []
        taken = take_calls(app, budget, op.id, now, windows, "lookup")
        if isinstance(taken, LevelWindow):
            op.wait_for_budget(now=now, scope=taken.level.scope, until=taken.end, epoch=flight.epoch)
            waits[op.id] = taken
            return []
        lookups[op.id] = (flight, budget.send_by)
        return taken

    def _record_unstorable(self, result: CommitResult, flights: dict[UUID, tuple[InFlight, Finished]],
                           now: datetime, counts: Counts) -> None:
        """The effect may have happened and what the provider said cannot be kept: the honest
        outcome is ambiguous (``outcome_unstorable``), on the attention queue with the error (one
        operation only). A write the database refused for the operation alone also records
        ``WriteRefused`` (``outcome``) with the database's text: no worker touches it until an
        operator acts, and nothing is sent again (issue 35)."""
        failed, refused = result.failed, result.refused

        def unstorable(epoch: int, error: str) -> Callable[[Operation], object]:
            def fact(o: Operation) -> None:
                o.mark_ambiguous(epoch=epoch, now=now, attempt_id=o.last_attempt_id, reason=UNSTORABLE,
                                 detail=f"the outcome could not be stored: {error}")

            return fact

        def change_of(fact: Callable[[Operation], object]) -> Change:
            def change(o: Operation) -> Sequence[Aggregate]:
                fact(o)
                return []

            return change

        try:
            notes = {op_id: RefusalNote(WriteKind.OUTCOME, error, flights[op_id][0].epoch,
                                        unstorable(flights[op_id][0].epoch, error))
                     for op_id, error in refused.items() if op_id in failed}
            done = self.committer.record_refusals(notes, now, counts) if notes else CommitResult()
            changes = [(op, change_of(unstorable(flights[op_id][0].epoch, failed[op_id])))
                       for op_id, op in self.committer.load([i for i in failed if i not in notes]).items()]
            done.committed.update(self.committer.commit(changes, counts).committed)
        except BaseException:
            self.egress.put_back([flights[op_id] for op_id in failed])  # as in ``run_once``: decided again
            raise
        for op in done.committed.values():
            self.settlement.offer(op)
