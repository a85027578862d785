"""The worker: claims due operations under a lease, records each attempt before egress, sends,
records the honest outcome, and settles it (DESIGN §7).

One thread of the worker does every ledger write (claims, attempt starts, lease renewals,
outcomes, settlements), batching them across operations; egress runs on a pool of daemon
threads that only call adapters and hand back outcome values. So an aggregate instance is never
shared between threads, and a slow provider never delays a renewal.

Recovery is the normal path: an operation whose lease expired is due again, is reclaimed with a
new epoch, and its open attempt is decided by the delivery mode (``executors.retry.decide`` with
``Ambiguous(reason="worker_lost")``).
"""

from __future__ import annotations

import queue
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Sequence
from uuid import UUID, uuid4

import structlog
from eventsourcing.domain import Aggregate

from executors.commit import Change, CommitResult, commit_changes
from projections.loading import load_aggregates
from executors.retry import AwaitCallback, GiveUp, Lookup, Record, Retry, after_lookup, decide
from executors.secrets import EnvironmentSecrets, MissingSecretError, SecretResolver, resolve_payload
from executors.settlement import settle_change, settlement_due
from ledger import lifecycle
from ledger.application import LedgerApplication
from ledger.clock import Clock
from ledger.declarations import DeliveryMode, RetryPolicy
from ledger.egress import Adapter, EgressRequest
from ledger.errors import ConfigurationError, LedgerError, UnknownIntegrationError
from ledger.operation import APPROVAL_REQUIRED, Operation
from ledger.outcomes import Accepted, Ambiguous, Failed, FailureCategory, Outcome, Succeeded
from ledger.status import ExecutionState as E
from projections.rows import DueRow
from projections.status import StatusProjection
from projections.view import StatusView

log = structlog.get_logger("opledger.worker")

DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_BATCH_SIZE = 200
DEFAULT_EGRESS_THREADS = 8
DEFAULT_POLL_INTERVAL_SECONDS = 0.2
DUE_READ_FACTOR = 4
"""Due rows read per cycle, as a multiple of the egress threads (see ``_take_due``)."""
DEFER_SECONDS = 30.0
"""How long a worker leaves an operation it cannot serve (missing secret, declaration, adapter)."""
KNOWN_OPERATIONS = 5000
"""Committed operations kept in memory between cycles (bounded, so memory is flat in backlog)."""
RENEW_WHEN_REMAINING = 1 / 3
"""Renew a lease once less than this fraction of it is left (DESIGN §7)."""


@dataclass(frozen=True)
class WorkerConfig:
    """Worker settings.

    Attributes:
        worker_id: unique per worker process (recorded on ``Claimed``).
        lease_seconds: lease length, seconds.
        batch_size: due rows read per cycle (at least ``DUE_READ_FACTOR`` times the egress threads).
        egress_threads: concurrent egress calls.
        poll_interval_seconds: idle wait between cycles, seconds.
    """

    worker_id: str
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    batch_size: int = DEFAULT_BATCH_SIZE
    egress_threads: int = DEFAULT_EGRESS_THREADS
    poll_interval_seconds: float = DEFAULT_POLL_INTERVAL_SECONDS


@dataclass
class Counts:
    """What one cycle did (``run_once`` returns it; tests and metrics read it)."""

    claimed: int = 0
    attempts: int = 0
    outcomes: int = 0
    retries: int = 0
    settled: int = 0
    renewed: int = 0
    deadlines: int = 0
    cancelled: int = 0
    rejected: int = 0

    @property
    def busy(self) -> bool:
        return any(vars(self).values())


@dataclass
class _InFlight:
    op: Operation
    epoch: int
    request: EgressRequest
    policy: RetryPolicy
    lost: bool = False


@dataclass(frozen=True)
class _Finished:
    operation_id: UUID
    kind: str  # "send" or "lookup"
    outcome: Outcome | None


@dataclass
class _Plan:
    """Requests built inside changes, submitted only after their commit."""

    sends: dict[UUID, tuple[EgressRequest, RetryPolicy, int]] = field(default_factory=dict)
    lookups: dict[UUID, tuple[EgressRequest, RetryPolicy, int]] = field(default_factory=dict)
    deferred: dict[UUID, str] = field(default_factory=dict)


class Worker:
    """Executes due operations of one host application.

    Args:
        app: the host application (its log holds the operations).
        view: the status view, to find due work.
        adapters: adapter name (as declared by integrations) to adapter.
        clock: injected UTC clock.
        config: :class:`WorkerConfig`.
        secrets: resolves ``secretref:`` payload values at egress.
        rng: random source for retry jitter.
        projection: when this worker also keeps the status projection (the SQLite owner), each
            cycle first applies new log entries to it.
        on_committed: called with the operations of each successful commit (their committed
            state); the runtime hands them to this process's status projection (``offer``).
    """

    def __init__(self, *, app: LedgerApplication, view: StatusView, adapters: Mapping[str, Adapter],
                 clock: Clock, config: WorkerConfig, secrets: SecretResolver | None = None,
                 rng: random.Random | None = None, projection: StatusProjection | None = None,
                 on_committed: Callable[[Iterable[Operation]], None] | None = None) -> None:
        self.app = app
        self.projection = projection
        self.on_committed = on_committed
        self.view = view
        self.adapters = dict(adapters)
        self.clock = clock
        self.config = config
        self.secrets = secrets or EnvironmentSecrets()
        self.rng = rng or random.Random()
        self.stopping = threading.Event()
        self._in_flight: dict[UUID, _InFlight] = {}
        self._known: OrderedDict[UUID, Operation] = OrderedDict()
        self._deferred: dict[UUID, datetime] = {}
        self._tasks: queue.Queue[tuple[str, EgressRequest, Adapter, datetime | None] | None] = queue.Queue()
        self._finished: queue.Queue[_Finished] = queue.Queue()
        self._threads = [threading.Thread(target=self._egress_loop, name=f"egress-{i}", daemon=True)
                         for i in range(config.egress_threads)]
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------------ the loop

    @property
    def in_flight(self) -> int:
        """Egress calls (and lookups) started and not yet recorded."""
        return len(self._in_flight)

    def run_once(self) -> Counts:
        """One cycle: record finished egress, renew leases, then take due work (unless stopping).

        Returns:
            :class:`Counts` of what was recorded.
        """
        counts = Counts()
        if self.projection is not None:
            try:
                self.projection.run_once()
            except Exception:  # the view lags; egress, outcomes and settlement carry on
                log.exception("status projection failed; retrying next cycle")
        self._record_finished(counts)
        self._renew_leases(counts)
        if not self.stopping.is_set():
            self._take_due(counts)
        return counts

    def run(self, stop: threading.Event, *, grace_seconds: float = 10.0) -> None:
        """Cycle until ``stop`` is set, then stop gracefully: take no new work, let in-flight
        attempts finish and record their outcomes for up to ``grace_seconds``, then return."""
        while not stop.is_set():
            if not self.run_once().busy:
                self._wait(self.config.poll_interval_seconds)
        self.stopping.set()
        deadline = self.clock.now().timestamp() + grace_seconds
        while self._in_flight and self.clock.now().timestamp() < deadline:
            self.run_once()
            self._wait(0.05)
        if self._in_flight:
            log.warning("stopping with attempts in flight; recovery will decide them",
                        operations=[str(i) for i in self._in_flight])

    def close(self) -> None:
        """Stop the egress threads (in-flight calls finish on their own, unrecorded)."""
        for _ in self._threads:
            self._tasks.put(None)

    def _wait(self, seconds: float) -> None:
        try:
            item = self._finished.get(timeout=seconds)
        except queue.Empty:
            return
        self._finished.put(item)  # recorded by the next cycle, in order with the others

    # ------------------------------------------------------------------ taking due work

    def _take_due(self, counts: Counts) -> None:
        now = self.clock.now()
        # Read well past what this worker can claim and shuffle it: workers sharing a store then
        # take mostly different operations from the head of the list instead of colliding.
        due = self.view.due(now, max(self.config.batch_size, DUE_READ_FACTOR * self.config.egress_threads))
        self.rng.shuffle(due)
        rows = self._actionable(due, now)
        # Held until after this cycle's commit: another worker of the store skips these rows.
        with self.view.reserve([row.operation_id for row in rows]) as reserved:
            self._decide_and_commit([row for row in rows if row.operation_id in reserved], now, counts)

    def _decide_and_commit(self, rows: list[DueRow], now: datetime, counts: Counts) -> None:
        ops = self._current(rows)
        plan = _Plan()
        changes: list[tuple[Operation, Change]] = []
        settling_entities: set[UUID] = set()
        entities = self._load_entities([op for op in ops if settlement_due(op, now)])
        # Claim no more than the egress threads can send at once: an attempt is recorded just
        # before its egress, so a crash leaves few started-but-unsent attempts to be ambiguous.
        capacity = self.config.egress_threads - len(self._in_flight)
        for op in ops:
            chosen = self._change_for(op, now, plan, settling_entities, entities, claim=capacity > 0)
            if chosen is not None:
                change, claims = chosen
                changes.append((op, change))
                capacity -= claims
        if not changes:
            return
        result = self._commit(changes, counts)
        for op_id, reason in plan.deferred.items():
            log.error("cannot serve this operation; it waits, and is retried later", operation_id=str(op_id),
                      reason=reason, retry_in_seconds=DEFER_SECONDS)
            self._deferred[op_id] = now + timedelta(seconds=DEFER_SECONDS)
        for op_id, op in result.committed.items():
            for kind, pending in (("send", plan.sends), ("lookup", plan.lookups)):
                if op_id in pending:
                    request, policy, epoch = pending[op_id]
                    self._submit(kind, op, epoch, request, policy)

    def _change_for(self, op: Operation, now: datetime, plan: _Plan, settling: set[UUID],
                    entities: dict[UUID, Aggregate], *, claim: bool) -> tuple[Change, bool] | None:
        """The change due for ``op`` at ``now`` and whether it claims, or None."""
        if settlement_due(op, now):
            if op.source.entity_id in settling:
                return None  # one settlement per entity per batch; the next cycle takes the other
            settling.add(op.source.entity_id)
            return settle_change(self.app, now, entities), False
        deadline = op.deadline_at
        if deadline is not None and deadline <= now:
            return _command(lambda o: o.exceed_deadline(now=now)), False
        if op.execution is E.PENDING and op.cancel_requested:
            return _command(lambda o: o.cancel(now=now, epoch=None)), False
        if op.execution not in lifecycle.ACTIVE or op.execution is E.ACCEPTED:
            return None  # accepted work waits for its callback or deadline
        if op.execution is E.PENDING and (op.approval == APPROVAL_REQUIRED or op.due_at > now):
            return None
        if op.execution is not E.PENDING and not op.lease_expired(now):
            return None
        return (self._claim_and_start(now, plan), True) if claim else None

    def _claim_and_start(self, now: datetime, plan: _Plan) -> Change:
        """Claim, then in the same commit start an attempt (or decide the open one)."""

        def change(op: Operation) -> Sequence[Aggregate]:
            plan.sends.pop(op.id, None)
            plan.lookups.pop(op.id, None)
            sends = op.execution is not E.DISPATCHING and not op.cancel_requested and op.attempts < op.max_attempts
            try:
                policy = self.app.registry.get(op.integration_name, op.integration_version).retry
                request = self._build_request(op, now) if sends else None
            except (MissingSecretError, UnknownIntegrationError, ConfigurationError) as exc:
                # This worker cannot serve it (a missing secret, declaration or adapter): a
                # deployment problem, not the operation's outcome. Claim nothing; it waits.
                plan.deferred[op.id] = str(exc)
                raise
            epoch = op.claim(now=now, worker_id=self.config.worker_id, lease_seconds=self.config.lease_seconds)
            if op.cancel_requested and op.execution is E.CLAIMED:
                op.cancel(now=now, epoch=epoch)
                return []
            if op.execution is E.DISPATCHING:
                # The previous owner died or stalled mid-attempt: its outcome is unknown.
                lost = Ambiguous(reason="worker_lost", detail="the previous lease expired with the attempt open")
                self._apply(op, epoch, decide(outcome=lost, mode=op.delivery_mode, policy=policy,
                                              attempts=op.attempts, now=now, rng=self.rng),
                            now, plan, policy, lost)
                return []
            if request is None:
                op.exhaust_budget(epoch=epoch, now=now, last_attempt_possibly_applied=False)
                return []
            op.start_attempt(epoch=epoch, now=now, attempt_id=request.attempt_id,
                             request_fingerprint=op.fingerprint)
            plan.sends[op.id] = (request, policy, epoch)
            return []

        return change

    def _build_request(self, op: Operation, now: datetime, attempt_id: UUID | None = None) -> EgressRequest:
        declaration = self.app.registry.get(op.integration_name, op.integration_version)
        if declaration.adapter not in self.adapters:
            raise ConfigurationError(f"no adapter {declaration.adapter!r} is configured in this worker")
        payload, secrets = resolve_payload(op.payload, self.secrets)
        return EgressRequest(
            operation_id=op.id, attempt_id=attempt_id or uuid4(), attempt_number=op.attempts + 1,
            integration=op.integration_name, delivery_mode=op.delivery_mode, target=op.target,
            payload=payload, traceparent=op.traceparent, timeout_seconds=declaration.request_timeout_seconds,
            tenant=op.tenant, secrets=tuple(secrets),
        )

    def _submit(self, kind: str, op: Operation, epoch: int, request: EgressRequest, policy: RetryPolicy) -> None:
        adapter = self.adapters[self.app.registry.get(op.integration_name, op.integration_version).adapter]
        self._in_flight[op.id] = _InFlight(op=op, epoch=epoch, request=request, policy=policy)
        self._tasks.put((kind, request, adapter, op.lease_expires_at))

    # ------------------------------------------------------------------ loading and committing

    def _actionable(self, rows: Sequence[DueRow], now: datetime) -> list[DueRow]:
        """Due rows worth loading now: every settlement, deadline or cancellation, but no more
        claims than there are free egress threads (the rest stay due for the next cycle), and
        nothing this worker deferred for a configuration problem until it is time to retry."""
        self._deferred = {i: t for i, t in self._deferred.items() if t > now}
        capacity = self.config.egress_threads - len(self._in_flight)
        chosen = []
        for row in rows:
            if row.operation_id in self._in_flight or row.operation_id in self._deferred:
                continue
            known = self._known.get(row.operation_id)
            if known is not None and known.version > row.version:
                # The view lags this worker's own commits: judge by what we committed.
                due = known.next_due_at
                if due is None or due > now:
                    continue
                claim = (known.settlement.value == "none" and known.execution.value in _CLAIMABLE
                         and not known.cancel_requested)
            else:
                claim = row.settlement == "none" and row.execution in _CLAIMABLE and not row.cancel_requested
            if claim:
                if capacity <= 0:
                    continue
                capacity -= 1
            chosen.append(row)
        return chosen

    def _current(self, rows: Sequence[DueRow]) -> list[Operation]:
        """The operations behind ``rows``: this worker's last committed instance where the row is
        not newer (the projection may lag our own writes), else one query for the rest. A stale
        instance is harmless: its commit conflicts and is redone against fresh state."""
        ops: dict[UUID, Operation] = {}
        missing: list[UUID] = []
        for row in rows:
            known = self._known.get(row.operation_id)
            if known is not None and known.version >= row.version:
                ops[row.operation_id] = known
            else:
                missing.append(row.operation_id)
        if missing:
            ops.update(self._load_operations(missing))
        return [ops[r.operation_id] for r in rows if r.operation_id in ops]

    def _load_operations(self, ids: list[UUID]) -> dict[UUID, Operation]:
        try:
            return load_aggregates(self.app, ids)
        except LedgerError:
            pass  # one corrupt record must not stop the batch: load one by one, skip the bad
        loaded: dict[UUID, Operation] = {}
        for op_id in ids:
            try:
                loaded[op_id] = self.app.get_operation(op_id)
            except LedgerError as exc:  # corrupt or vanished: fail closed, surface, move on
                log.error("cannot load due operation", operation_id=str(op_id), error=str(exc))
        return loaded

    def _load_entities(self, ops: Sequence[Operation]) -> dict[UUID, Aggregate]:
        if not ops:
            return {}
        try:
            return load_aggregates(self.app, [op.source.entity_id for op in ops])
        except LedgerError:
            return {}  # settlement loads each entity itself and records what fails

    def _commit(self, changes: list[tuple[Operation, Change]], counts: Counts) -> CommitResult:
        result = commit_changes(self.app, changes)
        counts.rejected += len(result.rejected)
        self._count(result.events, counts)
        for op_id, op in result.committed.items():
            self._known[op_id] = op
            self._known.move_to_end(op_id)
        for op_id in result.rejected:
            self._known.pop(op_id, None)
        if self.on_committed is not None and result.committed:
            self.on_committed(result.committed.values())
        while len(self._known) > KNOWN_OPERATIONS:
            self._known.popitem(last=False)
        return result

    # ------------------------------------------------------------------ egress threads

    def _egress_loop(self) -> None:
        while (task := self._tasks.get()) is not None:
            kind, request, adapter, not_after = task
            if not_after is not None and self.clock.now() >= not_after:
                # This process stalled between recording the attempt and sending it: another
                # worker may own the operation now, so nothing may leave (DESIGN §7).
                self._finished.put(_Finished(request.operation_id, kind, Failed(
                    FailureCategory.CONNECT, retryable=True, egress=False,
                    detail="lease expired before egress; nothing was sent")))
                continue
            try:
                outcome = adapter.send(request) if kind == "send" else adapter.lookup(request)
            except Exception as exc:  # an adapter bug must not kill the thread or lose the attempt
                log.exception("adapter raised", operation_id=str(request.operation_id))
                outcome = Ambiguous(reason="adapter_error", detail=f"{type(exc).__name__}: {exc}"[:500])
            self._finished.put(_Finished(request.operation_id, kind, outcome))

    # ------------------------------------------------------------------ recording outcomes

    def _record_finished(self, counts: Counts) -> None:
        finished: list[_Finished] = []
        while True:
            try:
                finished.append(self._finished.get_nowait())
            except queue.Empty:
                break
        if not finished:
            return
        now = self.clock.now()
        plan = _Plan()
        changes: list[tuple[Operation, Change]] = []
        for item in finished:
            flight = self._in_flight.pop(item.operation_id, None)
            if flight is None or flight.lost:
                log.info("late outcome dropped: this worker no longer holds the operation",
                         operation_id=str(item.operation_id))
                counts.rejected += 1
                continue
            changes.append((flight.op, self._outcome_change(flight, item, now, plan)))
        result = self._commit(changes, counts)
        for op_id, reason in result.rejected.items():
            log.info("outcome rejected (fenced)", operation_id=str(op_id), reason=reason)
        to_settle: list[Operation] = []
        entities: set[UUID] = set()
        for op_id, op in result.committed.items():
            if op_id in plan.lookups or op_id in plan.sends:
                pending = plan.lookups if op_id in plan.lookups else plan.sends
                request, policy, epoch = pending[op_id]
                self._submit("lookup" if pending is plan.lookups else "send", op, epoch, request, policy)
            elif settlement_due(op, now) and op.source.entity_id not in entities:
                entities.add(op.source.entity_id)
                to_settle.append(op)
        if to_settle:
            change = settle_change(self.app, now, self._load_entities(to_settle))
            self._commit([(op, change) for op in to_settle], counts)

    def _outcome_change(self, flight: _InFlight, item: _Finished, now: datetime, plan: _Plan) -> Change:
        def change(op: Operation) -> Sequence[Aggregate]:
            plan.lookups.pop(op.id, None)
            if item.kind == "lookup":
                decision = after_lookup(found=item.outcome, policy=flight.policy, attempts=op.attempts,
                                        now=now, rng=self.rng)
            else:
                assert item.outcome is not None
                decision = decide(outcome=item.outcome, mode=op.delivery_mode, policy=flight.policy,
                                  attempts=op.attempts, now=now, rng=self.rng)
            self._apply(op, flight.epoch, decision, now, plan, flight.policy, item.outcome, flight.request)
            return []

        return change

    def _apply(self, op: Operation, epoch: int, decision: Any, now: datetime, plan: _Plan,
               policy: RetryPolicy, outcome: Outcome | None, request: EgressRequest | None = None) -> None:
        attempt_id = op.last_attempt_id
        if isinstance(decision, Lookup):
            plan.lookups[op.id] = (request or self._build_request(op, now, attempt_id=op.last_attempt_id), policy, epoch)
        elif isinstance(decision, Retry):
            op.schedule_retry(epoch=epoch, now=now, attempt_id=attempt_id, retry_at=decision.at,
                              category=decision.category, reason=decision.reason,
                              possibly_applied=decision.possibly_applied)
        elif isinstance(decision, GiveUp):
            op.exhaust_budget(epoch=epoch, now=now,
                              last_attempt_possibly_applied=decision.last_attempt_possibly_applied)
        elif isinstance(decision, AwaitCallback):
            op.accept(epoch=epoch, now=now, attempt_id=attempt_id, remote_id=str(op.id),
                      excerpt=f"response lost ({decision.reason}); waiting for the provider's callback")
        elif isinstance(decision, Record):
            _record(op, epoch, attempt_id, decision.outcome, now)

    # ------------------------------------------------------------------ leases

    def _renew_leases(self, counts: Counts) -> None:
        now = self.clock.now()
        threshold = self.config.lease_seconds * RENEW_WHEN_REMAINING
        changes: list[tuple[Operation, Change]] = []
        for flight in self._in_flight.values():
            expires = flight.op.lease_expires_at
            if flight.lost or expires is None or (expires - now).total_seconds() > threshold:
                continue
            changes.append((flight.op, _command(lambda o, e=flight.epoch: o.renew_lease(
                epoch=e, now=now, lease_seconds=self.config.lease_seconds))))
        if not changes:
            return
        result = self._commit(changes, counts)
        for op_id, op in result.committed.items():
            self._in_flight[op_id].op = op
        for op_id, reason in result.rejected.items():
            # Cannot renew: another worker may reclaim it. Stop touching it (DESIGN §7).
            log.warning("lease lost", operation_id=str(op_id), reason=reason)
            self._in_flight[op_id].lost = True

    # ------------------------------------------------------------------ counting

    @staticmethod
    def _count(events: Sequence[str], counts: Counts) -> None:
        for name in events:
            attr = _COUNTED.get(name)
            if attr:
                setattr(counts, attr, getattr(counts, attr) + 1)


_CLAIMABLE = frozenset({E.PENDING.value, E.CLAIMED.value, E.DISPATCHING.value})

_COUNTED = {
    "Claimed": "claimed", "AttemptStarted": "attempts", "Succeeded": "outcomes", "Failed": "outcomes",
    "Ambiguous": "outcomes", "Accepted": "outcomes", "BudgetExhausted": "outcomes", "RetryScheduled": "retries",
    "Settled": "settled", "LeaseRenewed": "renewed", "DeadlineExceeded": "deadlines", "Cancelled": "cancelled",
}


def _command(command: Any) -> Change:
    """A change that runs one command on the operation and saves nothing else with it."""

    def change(op: Operation) -> Sequence[Aggregate]:
        command(op)
        return []

    return change


def _record(op: Operation, epoch: int, attempt_id: UUID | None, outcome: Outcome | None, now: datetime) -> None:
    """Record an outcome value as the matching fact (callback mode turns success into waiting)."""
    if isinstance(outcome, Succeeded):
        if op.delivery_mode is DeliveryMode.CALLBACK:
            op.accept(epoch=epoch, now=now, attempt_id=attempt_id, remote_id=outcome.remote_id or str(op.id),
                      status_code=outcome.status_code, excerpt=outcome.excerpt)
        else:
            op.succeed(epoch=epoch, now=now, attempt_id=attempt_id, status_code=outcome.status_code,
                       remote_id=outcome.remote_id, excerpt=outcome.excerpt)
    elif isinstance(outcome, Accepted):
        op.accept(epoch=epoch, now=now, attempt_id=attempt_id, remote_id=outcome.remote_id,
                  status_code=outcome.status_code, excerpt=outcome.excerpt)
    elif isinstance(outcome, Failed):
        op.fail(epoch=epoch, now=now, attempt_id=attempt_id, category=outcome.category,
                retryable=outcome.retryable, status_code=outcome.status_code, detail=outcome.detail)
    elif isinstance(outcome, Ambiguous):
        op.mark_ambiguous(epoch=epoch, now=now, attempt_id=attempt_id, reason=outcome.reason,
                          status_code=outcome.status_code, detail=outcome.detail)
    else:
        raise TypeError(f"not an outcome: {outcome!r}")
