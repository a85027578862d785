"""The due-work pass: read what is due, reserve it, and do for each operation what
``ledger.decisions.due_work`` says, in one commit per cycle.

Claims take an egress slot: a claim and its ``AttemptStarted`` commit together, and the call is
handed to egress only after that commit (an attempt is recorded before any byte leaves). No more
operations are claimed than egress has free slots, so a crash leaves few started-but-unsent
attempts. Settlement retries, passed deadlines and cancellations ride the same query and commit
(``executors.settlement``, ``executors.deadlines``); the claim change itself, which starts the
attempt or decides the open one of a reclaimed operation, is ``executors.attempts``.

Where workers share the store, the reservation is taken by the statement that reads
(``migrations.drivers.Reservations``):
a pickup reads new intents and reserves them at once, and the due-work pass reserves only the
operations that recorded nothing since the version it judged them by.

An operation this worker cannot serve (a missing secret, declaration or adapter: a deployment
problem, not the operation's outcome) is left alone for ``defer_seconds`` and logged once; so is
one whose change raised. Every other operation of the batch goes on.

Source: DESIGN §7; docs/adr/0002-executor-services.md.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

import structlog

from executors.attempts import ClaimChanges, Plan
from executors.budgets import budgeted
from executors.capacity import PassCapacity
from executors.commit import Change, CommitResult, Committer, Counts, RefusalNote
from executors.deadlines import cancel_change, exceed_deadline_change, remote_unknown_change
from executors.egress import EgressService
from executors.polling import PollingService
from executors.refusals import drifted_digest, mismatch_change, void_approval_change
from executors.secrets import SecretResolver
from executors.settlement import SettlementService, first_per_entity
from executors.tail import LogTail
from executors.unsure import UnsureClaims
from ledger.application import LedgerApplication
from ledger.approvals import void_reason
from ledger.config import DEFAULT_LEASE_SECONDS
from ledger.decisions import (
    Cancel,
    Claim,
    ExceedDeadline,
    MarkRemoteUnknown,
    Poll,
    Reclaim,
    Settle,
    Wait,
    due_work,
    may_need_egress,
)
from ledger.egress import Adapter
from ledger.facts import describe
from ledger.operation import Operation
from ledger.refusals import WriteKind
from ledger.status import ExecutionState as E
from ledger.status import SettlementState
from migrations.drivers import driver_of
from projections.rows import DueRow
from projections.view import ClaimView

log = structlog.get_logger("opledger.claim")

DEFAULT_BATCH_SIZE = 200
"""Due rows read per cycle (at least ``DUE_READ_FACTOR`` times the egress slots)."""
DUE_READ_FACTOR = 4
"""Due rows read per cycle, as a multiple of the egress slots (see ``ClaimService.run_once``)."""
DEFER_SECONDS = 30.0
"""How long a worker leaves an operation it cannot serve (missing secret, declaration, adapter)."""


@dataclass(frozen=True)
class ClaimConfig:
    """Due-work settings.

    Attributes:
        worker_id: recorded on ``Claimed``.
        lease_seconds: lease length given at claim, seconds.
        batch_size: due rows read per cycle, at least.
        defer_seconds: how long an operation this worker cannot serve is left alone, seconds.
    """

    worker_id: str
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    batch_size: int = DEFAULT_BATCH_SIZE
    defer_seconds: float = DEFER_SECONDS


_RECORDED: dict[type, tuple[Callable[[datetime], Change], WriteKind]] = {
    ExceedDeadline: (exceed_deadline_change, WriteKind.DEADLINE),
    MarkRemoteUnknown: (remote_unknown_change, WriteKind.DEADLINE),
    Cancel: (cancel_change, WriteKind.CANCELLATION),
}
"""Due work that only records a fact: the change that records it, and what it writes."""


class ClaimService:
    """Does the due work of one host application's operations.

    Args:
        committer: the worker's write side.
        view: the status view, to find due work.
        egress: where claimed attempts' calls go; its free slots bound the claims.
        settlement: settles what is due for settlement, in this pass's commit.
        adapters: adapter name (as declared by integrations) to adapter.
        secrets: resolves ``secretref:`` payload values at egress.
        rng: random source (row order, retry jitter of reclaimed attempts).
        config: :class:`ClaimConfig`.
        polling: follows accepted work this pass claims for polling (``ledger.decisions.Poll``);
            without it accepted work is left to other workers.
    """

    def __init__(self, *, committer: Committer, view: ClaimView, egress: EgressService,
                 settlement: SettlementService, adapters: Mapping[str, Adapter], secrets: SecretResolver,
                 rng: random.Random, config: ClaimConfig, polling: PollingService | None = None) -> None:
        self.polling = polling
        self.committer = committer
        self.app: LedgerApplication = committer.app
        self.view = view
        self.egress = egress
        self.settlement = settlement
        self.rng = rng
        self.attempts = ClaimChanges(app=self.app, adapters=adapters, secrets=secrets, rng=rng,
                                     worker_id=config.worker_id, lease_seconds=config.lease_seconds)
        self.capacity = PassCapacity(egress=egress, adapters=adapters.values(), adapter_of=self.attempts.adapter)
        self.config = config
        self._deferred: dict[UUID, datetime] = {}
        self._lock = threading.Lock()  # see ``_reserve_and_commit``
        self._unsure = UnsureClaims()
        self.store = driver_of(self.app)
        self.tail = LogTail(self.app, self.store, view, self._handled)

    def run_once(self, now: datetime) -> Counts:
        """Read due rows, keep those worth loading now, reserve them against other workers of
        the store, and do their due work in one commit.

        Returns:
            :class:`Counts` of what was committed.
        """
        counts = Counts()
        with self._lock:
            self._unsure.recheck(self.committer.load, self.egress.submit)
        # Read well past what this worker can claim and shuffle it: workers sharing a store then
        # take mostly different operations from the head of the list instead of colliding.
        wanted = max(self.config.batch_size, DUE_READ_FACTOR * self.capacity.room())
        due = self.view.due(now, wanted)
        free = self.capacity.room()
        if not self.view.in_process and len(due) < free:
            due += self.tail.read(free - len(due), {row.operation_id for row in due}, now)
        self._reserve_and_commit(due, now, counts)
        return counts

    def pickup(self, now: datetime) -> Counts:
        """Claim the intents appended since the last look, read from the log's tail alone (no
        due read): the orchestrator calls it between its other passes when a notification said
        events were appended (``LogTail.fresh``), so a new intent waits for the pass under way,
        not for the rest of the cycle (issue 17, pickup latency). Nothing to do on a backend
        whose view is kept in process (SQLite: one process, no tail to race for).

        Returns:
            :class:`Counts` of what was committed.
        """
        counts = Counts()
        if self.view.in_process or not self.tail.fresh or (free := self.capacity.room()) <= 0:
            return counts
        # Read and reserved in one round trip, held until after this commit; what another
        # worker reserved first is left out, so the loser of a race does nothing more.
        with self.store.reservations_hold() as taken:
            if held := self.tail.reserve(taken, free, now):
                with self._lock:
                    rows = self._actionable(held, now)
                self._load_and_commit(rows, now, counts, follow=False)
        return counts

    def _reserve_and_commit(self, due: list[DueRow], now: datetime, counts: Counts, *, follow: bool = True) -> None:
        """Reserve ``due`` and do their due work in one commit. The choice of rows and the
        decide-and-commit hold the lock, so two threads may run claim passes (a pickup thread
        was tried: ADR 0002) without sharing this service's memory or the egress slots they
        count unguarded. ``follow=False`` leaves accepted work to the due-work pass."""
        if not due:
            return
        with self._lock:
            self.rng.shuffle(due)
            rows = self._actionable(due, now)
        # Held until after this commit: another worker of the store (or this worker's other
        # thread) skips these rows. The reservation and the load wait for no one.
        if self.view.in_process:  # the view's own reservations (workers of one process)
            with self.view.reserve([row.operation_id for row in rows]) as reserved:
                self._load_and_commit([row for row in rows if row.operation_id in reserved], now, counts, follow)
            return
        # Only operations that recorded nothing since the version they were judged by: one
        # another worker moved on meanwhile is left to the view's next row, not loaded here.
        with self.store.reservations_hold() as taken:
            reserved = taken.operations_reserve_current([(row.operation_id, self._judged(row)) for row in rows])
            self._load_and_commit([row for row in rows if row.operation_id in reserved], now, counts, follow)

    def _judged(self, row: DueRow) -> int:
        """The version ``row``'s operation is judged by: this worker's own last commit when it
        is newer than the row (``_actionable``, ``_current``), else the row's."""
        known = self.committer.known(row.operation_id)
        return known.version if known is not None and known.version > row.version else row.version

    def _load_and_commit(self, rows: list[DueRow], now: datetime, counts: Counts, follow: bool) -> None:
        """Load the operations of ``rows`` (reserved by this worker) and do their due work in
        one commit."""
        ops = self._current(rows)
        with self._lock:
            self._decide_and_commit(ops, now, counts, follow)

    def _handled(self, op_id: UUID, version: int) -> bool:
        known = self.committer.known(op_id)
        return known is not None and known.version > version

    def _actionable(self, rows: Sequence[DueRow], now: datetime) -> list[DueRow]:
        """Due rows worth loading now: every settlement, deadline or cancellation, but no more
        that may need egress than there are free slots (the rest stay due for the next cycle),
        none known to go to a host whose slots are taken, and nothing this worker deferred until
        it is time to retry."""
        self._deferred = {i: t for i, t in self._deferred.items() if t > now}
        capacity = self.capacity.room()
        chosen = []
        for row in rows:
            if (row.operation_id in self.egress.in_flight or row.operation_id in self._deferred
                    or self.committer.is_set_aside(row.operation_id)):
                continue  # busy, deferred, or nothing can be recorded for it (issue 35)
            if self.capacity.host_full(row.operation_id):
                continue
            known = self.committer.known(row.operation_id)
            if known is not None and known.version > row.version:
                # The view lags this worker's own commits: judge by what we committed.
                if isinstance(due_work(known, now), Wait):
                    continue
                slot = may_need_egress(known.execution, known.settlement, known.cancel_requested)
            else:
                slot = may_need_egress(E(row.execution), SettlementState(row.settlement), row.cancel_requested)
            if slot:
                if capacity <= 0:
                    continue
                capacity -= 1
            chosen.append(row)
        return chosen

    def _current(self, rows: Sequence[DueRow]) -> list[Operation]:
        """The operations behind ``rows``: this worker's last committed instance where the row is
        not newer (the projection may lag our own writes), or the intent the log's tail just
        read (``LogTail.operation``), else one query for the rest. A stale
        instance is harmless: its commit conflicts and is redone against fresh state."""
        ops: dict[UUID, Operation] = {}
        missing: list[UUID] = []
        for row in rows:
            known = self.committer.known(row.operation_id)
            if known is None or known.version < row.version:
                known = self.tail.operation(row.operation_id, row.version)
            if known is not None and known.version >= row.version:
                ops[row.operation_id] = known
            else:
                missing.append(row.operation_id)
        ops.update(self.committer.load(missing))
        return [ops[r.operation_id] for r in rows if r.operation_id in ops]

    def _decide_and_commit(self, ops: list[Operation], now: datetime, counts: Counts, follow: bool) -> None:
        plan = Plan()
        changes: list[tuple[Operation, Change]] = []
        kinds: dict[UUID, WriteKind] = {}  # what each change writes, should the store refuse it
        settling: list[Operation] = []
        capacity = self.capacity.room()
        polls = self.polling.room() if self.polling is not None and follow else 0
        by_host: Counter[str] = Counter()  # claims of this pass per target host
        for op in ops:
            try:
                work = due_work(op, now)
            except Exception as exc:  # one operation's unreadable state: that operation only
                self._defer(op.id, now, "due_work", exc)
                continue
            if isinstance(work, Wait):
                self.tail.pass_over(op, work.until, now)
            recorded = _RECORDED.get(type(work))
            if isinstance(work, Settle):
                settling.append(op)
            elif recorded is not None:
                changes.append((op, recorded[0](now)))
                kinds[op.id] = recorded[1]
            elif isinstance(work, Poll) and self.polling is not None and polls > 0:
                polls -= 1
                plan.polls.add(op.id)
                changes.append((op, self.polling.claim_change(now)))
                kinds[op.id] = WriteKind.POLL
            elif isinstance(work, (Claim, Reclaim)):
                change = self._egress_change(op, now, plan, capacity, by_host)
                if change is not None:
                    changes.append((op, change[0]))
                    kinds[op.id] = WriteKind.CLAIM if change[1] else WriteKind.OTHER
                    capacity -= change[1]
        if not changes and not settling:
            return
        result = self._commit(plan, first_per_entity(settling), changes, now, counts)
        if refused := {op_id: RefusalNote(kinds[op_id], text) for op_id, text in result.refused.items()
                       if op_id in kinds}:
            # Refused for that operation alone (issue 35): it says so, and waits for an
            # operator; a refused claim sent nothing (its attempt was never recorded).
            self.committer.record_refusals(refused, now, counts)
        self._after_commit(plan, result, now)

    def _commit(self, plan: Plan, settling: list[Operation], changes: list[tuple[Operation, Change]],
                now: datetime, counts: Counts) -> CommitResult:
        try:
            return self.settlement.commit(settling, now, counts, changes)
        except Exception:
            self._unsure.add(plan.calls)  # a commit of unknown fate: ``executors.unsure``
            raise

    def _after_commit(self, plan: Plan, result: CommitResult, now: datetime) -> None:
        """Defer what this worker cannot serve, then hand committed attempts to egress."""
        for op_id, reason in plan.deferred.items():
            self.committer.report(op_id, "cannot_serve", f"{reason}; retried in {self.config.defer_seconds}s")
            self._deferred[op_id] = now + timedelta(seconds=self.config.defer_seconds)
        for op_id in result.failed:
            self._deferred[op_id] = now + timedelta(seconds=self.config.defer_seconds)
        for op_id, op in result.committed.items():
            if op_id in plan.polls and self.polling is not None:
                self.polling.hold(op, now)
                continue
            call = plan.calls.get(op_id)
            if call is None:
                continue
            # Only the attempt the store now holds may leave (DESIGN §7): a call built by an
            # earlier run of a change whose final run recorded something else (a budget wait
            # after a conflict) is dropped, never sent.
            if call.request.attempt_id not in (op.open_attempt_id, op.last_attempt_id):
                log.error("call dropped: its attempt was not recorded", operation_id=str(op_id),
                          attempt_id=str(call.request.attempt_id))
                continue
            call.op = op
            self.egress.submit(call)

    def _defer(self, op_id: UUID, now: datetime, problem: str, exc: Exception) -> None:
        self.committer.report(op_id, problem, describe(exc))
        self._deferred[op_id] = now + timedelta(seconds=self.config.defer_seconds)

    def _egress_change(self, op: Operation, now: datetime, plan: Plan, capacity: int,
                       by_host: Counter[str]) -> tuple[Change, int] | None:
        """The change for claimable ``op`` and the egress slots it takes: a refusal when its
        declaration drifted, a claim when a slot (and its host's) is free, else None."""
        if drifted_digest(self.app, op) is not None:
            return mismatch_change(self.app, now, self.config.worker_id, plan.deferred), 0
        if void_reason(op, now) is not None:
            return void_approval_change(now), 0
        if capacity > 0 and self.capacity.take(op, by_host):
            change = self.attempts.claim_change(now, plan)
            return budgeted(self.app, change, plan, now, plan.windows), 1
        return None
