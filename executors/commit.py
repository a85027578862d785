"""Commit many operations' changes in one transaction, without weakening fencing, and without
letting one operation's trouble reach the others.

Each change is a function that runs commands on an operation (and may return other aggregates,
such as the source entity, to save with it). All changes of a batch are saved with one
``save()``: one commit instead of N. If any aggregate's version conflicts, the library rejects
the whole transaction and drops every pending event (DESIGN §11), so the batch is reloaded in one
query and every change decided again: a change whose epoch went stale now raises and is
rejected, the others commit together. Only a batch that keeps conflicting, or that cannot be
stored (a value the codec refuses), is committed one by one, so the one operation at fault is
found and the rest commit. Fencing is the aggregate's and the database's, never this module's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from uuid import UUID

import structlog
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError, PersistenceError

from ledger.application import LedgerApplication
from ledger.errors import LedgerError
from ledger.facts import describe
from ledger.operation import Operation
from projections.loading import load_aggregates

log = structlog.get_logger("opledger.commit")

BATCH_TRIES = 3
"""Whole-batch attempts (the first, then after reloading on a conflict) before one by one."""
KNOWN_OPERATIONS = 5000
"""Committed operations a worker keeps in memory between cycles (bounded: memory stays flat)."""
REPORTED_PROBLEMS = 10_000
"""Problems remembered so each is logged once per operation, not once per cycle."""

Change = Callable[[Operation], Sequence[Aggregate]]
"""Runs commands on the operation; returns other aggregates to save in the same transaction.
Raising a ``LedgerError`` rejects the change (stale epoch, illegal transition...); raising
anything else rejects it too and marks it failed (:attr:`CommitResult.failed`)."""


@dataclass
class CommitResult:
    """What a batch commit did.

    Attributes:
        committed: operation id to the operation as committed (use these instances from now on).
        rejected: operation id to the reason its change was not committed (fencing, lifecycle).
        failed: operation id to an error that is the operation's own trouble, not a lost race:
            a change that raised something other than a ``LedgerError``, or events the store
            refused (a value the codec cannot store). These are also in ``rejected``.
        events: names of the ledger events committed, in order, for counting.
        conflicts: how many batch saves hit a version conflict (another writer got there first).
    """

    committed: dict[UUID, Operation] = field(default_factory=dict)
    rejected: dict[UUID, str] = field(default_factory=dict)
    failed: dict[UUID, str] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    conflicts: int = 0

    def _fail(self, op_id: UUID, exc: BaseException) -> None:
        self.rejected[op_id] = self.failed[op_id] = describe(exc)


def _apply(op: Operation, change: Change, result: CommitResult) -> list[Aggregate] | None:
    """Run ``change`` on ``op``; the aggregates to save, or None when it was rejected."""
    try:
        return [op, *change(op)]
    except LedgerError as exc:
        result.rejected[op.id] = str(exc)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # host code in a change may raise anything, even SystemExit: that operation only
        result._fail(op.id, exc)
    return None


def commit_changes(app: LedgerApplication, changes: Sequence[tuple[Operation, Change]]) -> CommitResult:
    """Apply each change to its operation and save them all in one transaction.

    Args:
        app: the host application.
        changes: ``(operation, change)`` pairs; each operation appears once.

    Returns:
        A :class:`CommitResult`. Operations passed in must not be used after this call: on a
        conflict their in-memory state ran ahead of the store.

    Raises:
        eventsourcing.persistence.PersistenceError: other than a version conflict (broken
            infrastructure), propagated.
    """
    result = CommitResult()
    pending = list(changes)
    for attempt in range(BATCH_TRIES):
        if attempt:
            # Another writer moved some of them: reload the whole batch in one query and decide
            # again; the changes whose epoch went stale now raise and are rejected.
            try:
                fresh = load_aggregates(app, [op.id for op, _ in pending])
            except LedgerError:
                break  # a record that does not decode: sort it out one by one below
            pending = [(fresh[op.id], change) for op, change in pending if op.id in fresh]
        batch: list[Aggregate] = []
        applied: list[tuple[Operation, Change]] = []
        for op, change in pending:
            saved = _apply(op, change, result)
            if saved is not None:
                batch.extend(saved)
                applied.append((op, change))
        if not applied:
            return result
        names = [type(e).__name__ for op, _ in applied for e in op.pending_events]
        try:
            app.save(*batch)
        except IntegrityError:
            log.debug("batch conflicted", size=len(applied), attempt=attempt + 1)
            result.conflicts += 1
            pending = applied
            continue
        except PersistenceError:
            raise  # broken infrastructure: nothing an operation did
        except Exception:  # something in the batch cannot be stored: find it one by one
            pending = applied
            break
        for op, _ in applied:
            result.committed[op.id] = op
        result.events.extend(names)
        return result
    for op, change in pending:
        _commit_alone(app, op.id, change, result)
    return result


def _commit_alone(app: LedgerApplication, op_id: UUID, change: Change, result: CommitResult) -> None:
    result.rejected.pop(op_id, None)
    result.failed.pop(op_id, None)
    try:
        fresh = app.get_operation(op_id)
    except LedgerError as exc:
        result.rejected[op_id] = str(exc)
        return
    saved = _apply(fresh, change, result)
    if saved is None:
        return
    names = [type(e).__name__ for e in fresh.pending_events]
    try:
        app.save(*saved)
    except IntegrityError as exc:
        result.rejected[op_id] = str(exc) or type(exc).__name__
        return
    except PersistenceError:
        raise
    except Exception as exc:  # this operation's events (or its entity's) cannot be stored
        result._fail(op_id, exc)
        return
    result.committed[op_id] = fresh
    result.events.extend(names)


@dataclass
class Counts:
    """What one cycle of a worker's services did (``run_once`` returns it; tests read it)."""

    claimed: int = 0
    attempts: int = 0
    outcomes: int = 0
    retries: int = 0
    settled: int = 0
    renewed: int = 0
    deadlines: int = 0
    cancelled: int = 0
    rejected: int = 0
    failed: int = 0
    polls: int = 0
    observed: int = 0

    @property
    def busy(self) -> bool:
        """True when anything was done (the loop then goes on without waiting)."""
        return any(vars(self).values())

    def add(self, other: Counts) -> Counts:
        """Add ``other``'s counts to these; returns self."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self


_COUNTED = {
    "Claimed": "claimed", "AttemptStarted": "attempts", "Succeeded": "outcomes", "Failed": "outcomes",
    "Ambiguous": "outcomes", "Accepted": "outcomes", "BudgetExhausted": "outcomes", "RetryScheduled": "retries",
    "Settled": "settled", "LeaseRenewed": "renewed", "DeadlineExceeded": "deadlines", "Cancelled": "cancelled",
    "RemoteStatusObserved": "observed", "RemoteOverdue": "deadlines",
}


class Committer:
    """The write side shared by a worker's services: commits batches, counts what committed,
    remembers the operations it committed (the status view may lag them), hands committed
    states on (``on_committed``), and logs each operation's problem once. Thread-safe.

    Args:
        app: the host application.
        on_committed: called with the operations of each successful commit; the runtime hands
            them to this process's status projection (``StatusProjection.offer``).
        known_size: committed operations kept in memory, at most.
    """

    def __init__(self, app: LedgerApplication, *,
                 on_committed: Callable[[Iterable[Operation]], None] | None = None,
                 known_size: int = KNOWN_OPERATIONS) -> None:
        self.app = app
        self.on_committed = on_committed
        self._known: OrderedDict[UUID, Operation] = OrderedDict()
        self._known_size = known_size
        self._reported: OrderedDict[tuple[UUID, str], None] = OrderedDict()
        # Commits may come from more than one thread: the bookkeeping is guarded.
        self._lock = threading.Lock()

    def commit(self, changes: list[tuple[Operation, Change]], counts: Counts) -> CommitResult:
        """Commit ``changes`` (see :func:`commit_changes`), count them into ``counts``, and
        remember the committed operations. Failed operations are reported (once each)."""
        result = commit_changes(self.app, changes) if changes else CommitResult()
        counts.rejected += len(result.rejected)
        counts.failed += len(result.failed)
        for name in result.events:
            attr = _COUNTED.get(name)
            if attr:
                setattr(counts, attr, getattr(counts, attr) + 1)
        with self._lock:
            for op_id, op in result.committed.items():
                self._known[op_id] = op
                self._known.move_to_end(op_id)
            for op_id in result.rejected:
                self._known.pop(op_id, None)
            while len(self._known) > self._known_size:
                self._known.popitem(last=False)
        for op_id, error in result.failed.items():
            self.report(op_id, "change_failed", error)
        if self.on_committed is not None and result.committed:
            self.on_committed(result.committed.values())
        return result

    def known(self, op_id: UUID) -> Operation | None:
        """This worker's last committed state of ``op_id``, if it still remembers it."""
        return self._known.get(op_id)

    def load(self, ids: Sequence[UUID]) -> dict[UUID, Operation]:
        """The current state of each operation in ``ids`` that loads; one that does not (a
        corrupt or unreadable record) is reported once and left out: the status projection
        puts it on the attention queue."""
        if not ids:
            return {}
        try:
            return load_aggregates(self.app, ids)
        except LedgerError:
            pass  # one bad record must not stop the batch: load one by one, skip the bad
        loaded: dict[UUID, Operation] = {}
        for op_id in ids:
            try:
                loaded[op_id] = self.app.get_operation(op_id)
            except LedgerError as exc:
                self.report(op_id, "unloadable", str(exc))
        return loaded

    def report(self, op_id: UUID, problem: str, detail: str) -> None:
        """Log ``problem`` for ``op_id`` once (bounded memory), not once per cycle."""
        key = (op_id, problem)
        with self._lock:
            if key in self._reported:
                return
            self._reported[key] = None
            if len(self._reported) > REPORTED_PROBLEMS:
                self._reported.popitem(last=False)
        log.error("operation set aside", operation_id=str(op_id), problem=problem, detail=detail)
