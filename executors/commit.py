"""Commit many operations' changes in one transaction, without weakening fencing, and without
letting one operation's trouble reach the others.

Each change is a function that runs commands on an operation (and may return other aggregates,
such as the source entity, to save with it). All changes of a batch are saved with one
``save()``: one commit instead of N. If any aggregate's version conflicts, the library rejects
the whole transaction and drops every pending event (DESIGN §11), so the batch is reloaded in one
query and every change decided again: a change whose epoch went stale now raises and is
rejected, the others commit together. Only a batch that keeps conflicting, or that cannot be
stored (a value the codec refuses, a row the database refuses), is committed in halves, down to
one operation, so the operation at fault is found and the rest commit. A write the database
refused for one operation alone is that operation's problem unless the store refuses every
write (``ledger.refusals.refusal_scope``, issue 35); the services record what it leaves
(``Committer.record_refusals``). Fencing is the aggregate's and the database's, never this
module's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any
from uuid import UUID

import structlog
from eventsourcing.domain import Aggregate

from executors.activity import log_activity
from ledger.application import LedgerApplication
from ledger.errors import LedgerError
from ledger.facts import describe
from ledger.operation import Operation
from ledger.outages import SaveFault, save_fault
from ledger.refusals import RefusalScope, WriteKind, refusal_scope, refusal_text
from projections.loading import load_aggregates
from projections.probe import probe_refused

log = structlog.get_logger("opledger.commit")

BATCH_TRIES = 3
"""Whole-batch attempts (the first, then after reloading on a conflict) before one by one."""
KNOWN_OPERATIONS = 5000
"""Committed operations a worker keeps in memory between cycles (bounded: memory stays flat)."""
REPORTED_PROBLEMS = 10_000
"""Problems remembered so each is logged once per operation, not once per cycle."""
NOTE_TRIES = 2
"""Commits of what a refused write leaves (``Committer.record_refusals``) before the operation is
only set aside: a store refusing rows at random takes the second."""
SET_ASIDE = 10_000
"""Operations a worker leaves alone because nothing could be recorded for them (bounded)."""

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
            a change that raised something other than a ``LedgerError``, or events that could
            not be stored (a value the codec cannot store, or a write the database refused for
            that operation alone). These are also in ``rejected``.
        refused: operation id to the database's error text (``ledger.refusals.refusal_text``)
            for each write the database refused for that operation alone while it accepts
            others (issue 35). These are also in ``failed``.
        events: the ledger events committed, in order (counted, and logged by
            ``executors.activity``).
        conflicts: how many batch saves hit a version conflict (another writer got there first).
    """

    committed: dict[UUID, Operation] = field(default_factory=dict)
    rejected: dict[UUID, str] = field(default_factory=dict)
    failed: dict[UUID, str] = field(default_factory=dict)
    refused: dict[UUID, str] = field(default_factory=dict)
    events: list[Any] = field(default_factory=list)
    conflicts: int = 0

    def _fail(self, op_id: UUID, exc: BaseException) -> None:
        self.rejected[op_id] = self.failed[op_id] = describe(exc)


@dataclass(frozen=True)
class RefusalNote:
    """What a write the store refused for one operation leaves on it
    (:meth:`Committer.record_refusals`): ``WriteRefused`` with ``kind`` and ``error``, under
    ``epoch`` (the lease holder's, or None), then ``fact`` (the fact the refusal makes true
    instead, such as ``Ambiguous(outcome_unstorable)`` or ``SettlementBlocked``), if any.

    Source: issue 35 item 2.
    """

    kind: WriteKind
    error: str
    epoch: int | None = None
    fact: Callable[[Operation], object] | None = None


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


def commit_changes(app: LedgerApplication, changes: Sequence[tuple[Operation, Change]], *,
                   probe: Callable[[LedgerApplication], bool] | None = None) -> CommitResult:
    """Apply each change to its operation and save them all in one transaction.

    A batch the store does not take for good (``ledger.outages.save_fault``: refused by the
    database, or a value the codec cannot store) is committed in parts, halving it until each
    part commits or holds one operation, so the operations at fault are found and every other
    change commits. Whose problem a write refused for one operation alone is, that
    operation's or the store's, is ``ledger.refusals.refusal_scope``'s rule: the operation's
    when another write of the batch was accepted, or when ``probe`` says the store accepts
    writes; then the operation is in :attr:`CommitResult.refused` and the caller records what
    the refusal leaves (``Committer.record_refusals``).

    Args:
        app: the host application.
        changes: ``(operation, change)`` pairs; each operation appears once.
        probe: asked only when nothing of the batch was accepted: whether the store refuses
            every probe write (default: ``projections.probe.probe_refused``).

    Returns:
        A :class:`CommitResult`. Operations passed in must not be used after this call: on a
        conflict their in-memory state ran ahead of the store.

    Raises:
        eventsourcing.persistence.PersistenceError: the store is unreachable for now
            (``ledger.outages.is_transient``), or it refused the writes of every operation and
            the probe writes too (a store-wide refusal: a dropped table, a revoked permission, a
            read-only store); the error is the store's own, propagated.

    Source: issue 35 item 1; docs/adr/0002-executor-services.md ("Refused writes").
    """
    result = CommitResult()
    pending = list(changes)
    refusals: dict[UUID, BaseException] = {}
    for attempt in range(BATCH_TRIES):
        if attempt:
            # Another writer moved some of them: reload the whole batch in one query and decide
            # again; the changes whose epoch went stale now raise and are rejected.
            try:
                fresh = load_aggregates(app, [op.id for op, _ in pending])
            except LedgerError:
                break  # a record that does not decode: sort it out part by part below
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
        recorded = [e for op, _ in applied for e in op.pending_events]
        try:
            app.save(*batch)
        except Exception as exc:
            fault = save_fault(exc)
            if fault is SaveFault.OUTAGE:
                raise
            if fault is SaveFault.CONFLICT:
                log.debug("batch conflicted", size=len(applied), attempt=attempt + 1)
                result.conflicts += 1
                pending = applied
                continue
            if len(applied) == 1:  # refused alone already: that operation's write
                _failed_alone(applied[0][0].id, exc, fault, result, refusals)
                return _judged(app, result, refusals, probe)
            pending = applied  # something in the batch cannot be stored: find it part by part
            break
        for op, _ in applied:
            result.committed[op.id] = op
        result.events.extend(recorded)
        return result
    _commit_parts(app, pending, result, refusals)
    return _judged(app, result, refusals, probe)


def _judged(app: LedgerApplication, result: CommitResult, refusals: dict[UUID, BaseException],
            probe: Callable[[LedgerApplication], bool] | None) -> CommitResult:
    """Apply ``refusal_scope`` to the writes refused alone: the store's problem raises the
    store's error; an operation's is put in ``result.refused``."""
    if not refusals:
        return result
    accepted = len(result.committed)
    scope = refusal_scope(accepted=accepted, probe_refused=None)
    if scope is RefusalScope.PROBE:
        scope = refusal_scope(accepted=accepted, probe_refused=(probe or probe_refused)(app))
    if scope is RefusalScope.STORE:
        error = next(iter(refusals.values()))
        log.error("the store refuses every write", operations=len(refusals), error=refusal_text(error))
        raise error
    for op_id, exc in refusals.items():
        result.refused[op_id] = refusal_text(exc)
    return result


def _failed_alone(op_id: UUID, exc: BaseException, fault: SaveFault, result: CommitResult,
                  refusals: dict[UUID, BaseException]) -> None:
    """Record that ``op_id``'s write alone was not taken: refused by the database (judged by
    :func:`_judged`), or not storable at all (the operation's own trouble)."""
    result._fail(op_id, exc)
    if fault is SaveFault.REFUSED:
        refusals[op_id] = exc


def _commit_parts(app: LedgerApplication, pending: list[tuple[Operation, Change]], result: CommitResult,
                  refusals: dict[UUID, BaseException]) -> None:
    """Commit ``pending`` (whose batch failed) in halves, each reloaded in one query; a half that
    fails is halved again, down to one operation (:func:`_commit_alone`)."""
    if len(pending) == 1:
        op, change = pending[0]
        _commit_alone(app, op.id, change, result, refusals)
        return
    middle = len(pending) // 2
    for part in (pending[:middle], pending[middle:]):
        if len(part) == 1:
            _commit_alone(app, part[0][0].id, part[0][1], result, refusals)
        else:
            _commit_part(app, part, result, refusals)


def _commit_part(app: LedgerApplication, part: list[tuple[Operation, Change]], result: CommitResult,
                 refusals: dict[UUID, BaseException]) -> None:
    """Reload ``part`` in one query and commit it in one transaction; halve it if that fails."""
    try:
        fresh = load_aggregates(app, [op.id for op, _ in part])
    except LedgerError:  # a record that does not decode: each alone, so the bad one is found
        for op, change in part:
            _commit_alone(app, op.id, change, result, refusals)
        return
    batch: list[Aggregate] = []
    applied: list[tuple[Operation, Change]] = []
    for op_id, change in ((op.id, change) for op, change in part):
        result.rejected.pop(op_id, None)
        result.failed.pop(op_id, None)
        if op_id not in fresh:
            result.rejected[op_id] = "not found"
            continue
        saved = _apply(fresh[op_id], change, result)
        if saved is not None:
            batch.extend(saved)
            applied.append((fresh[op_id], change))
    if not applied:
        return
    recorded = [e for op, _ in applied for e in op.pending_events]
    try:
        app.save(*batch)
    except Exception as exc:
        if save_fault(exc) is SaveFault.OUTAGE:
            raise
        _commit_parts(app, applied, result, refusals)
        return
    for op, _ in applied:
        result.committed[op.id] = op
    result.events.extend(recorded)


def _commit_alone(app: LedgerApplication, op_id: UUID, change: Change, result: CommitResult,
                  refusals: dict[UUID, BaseException]) -> None:
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
    recorded = list(fresh.pending_events)
    try:
        app.save(*saved)
    except Exception as exc:
        fault = save_fault(exc)
        if fault is SaveFault.OUTAGE:
            raise
        if fault is SaveFault.CONFLICT:
            result.rejected[op_id] = str(exc) or type(exc).__name__
            return
        _failed_alone(op_id, exc, fault, result, refusals)  # this operation's events (or its entity's)
        return
    result.committed[op_id] = fresh
    result.events.extend(recorded)


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
    refused: int = 0

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
        self._set_aside: OrderedDict[UUID, None] = OrderedDict()
        # Commits may come from more than one thread: the bookkeeping is guarded.
        self._lock = threading.Lock()

    def commit(self, changes: list[tuple[Operation, Change]], counts: Counts) -> CommitResult:
        """Commit ``changes`` (see :func:`commit_changes`), count them into ``counts``, and
        remember the committed operations. Failed operations are reported (once each)."""
        result = commit_changes(self.app, changes) if changes else CommitResult()
        counts.rejected += len(result.rejected)
        counts.failed += len(result.failed)
        counts.refused += len(result.refused)
        for event in result.events:
            attr = _COUNTED.get(type(event).__name__)
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
            refused = result.refused.get(op_id)
            self.report(op_id, "change_failed" if refused is None else "write_refused", refused or error)
        if self.on_committed is not None and result.committed:
            self.on_committed(result.committed.values())
        log_activity(result.events, result.committed)  # after on_committed: the log context knows them
        return result

    def record_refusals(self, notes: Mapping[UUID, RefusalNote], now: datetime, counts: Counts) -> CommitResult:
        """Record on each operation of ``notes`` what the write the store refused for it alone
        leaves: ``WriteRefused`` (``Operation.note_refused_write``), then its ``fact``, in one
        commit with the others, on a fresh load. Workers then leave the operation to an
        operator (``due_work`` is ``Wait(None)``). What the store refuses again is tried once
        more (``NOTE_TRIES``); an operation for which nothing can be recorded is logged,
        counted and set aside by this worker (:meth:`set_aside`).

        Args:
            notes: operation id to its :class:`RefusalNote`.
            now: UTC-aware instant of the facts.
            counts: what was committed is counted into it.

        Returns:
            The :class:`CommitResult` of the notes (``committed``: operations now carrying
            ``WriteRefused``; ``rejected``: those whose note no longer applies, e.g. another
            worker took the operation over).

        Raises:
            eventsourcing.persistence.PersistenceError: the store became unreachable, or
                refuses every write (:func:`commit_changes`).

        Source: issue 35 item 2; docs/adr/0002-executor-services.md ("Refused writes").
        """

        def noted(note: RefusalNote) -> Change:
            def change(op: Operation) -> Sequence[Aggregate]:
                # The note first: the operation goes onto the attention queue once, as
                # ``write_refused``, whatever the fact makes it too.
                op.note_refused_write(now=now, kind=note.kind, error=note.error, epoch=note.epoch)
                if note.fact is not None:
                    note.fact(op)
                return []

            return change

        total = CommitResult()
        remaining = dict(notes)
        for _ in range(NOTE_TRIES):
            ops = self.load(list(remaining))
            result = self.commit([(op, noted(remaining[op_id])) for op_id, op in ops.items()], counts)
            total.committed.update(result.committed)
            total.rejected.update({i: r for i, r in result.rejected.items() if i not in result.refused})
            total.events.extend(result.events)
            remaining = {op_id: note for op_id, note in remaining.items() if op_id in result.refused}
            if not remaining:
                break
        for op_id, note in remaining.items():
            total.rejected[op_id] = total.failed[op_id] = total.refused[op_id] = note.error
            self.set_aside(op_id)
            log.error("operation set aside: the store refuses what its refused write leaves too",
                      operation_id=str(op_id), kind=note.kind.value, error=note.error)
        return total

    def set_aside(self, op_id: UUID) -> None:
        """Leave ``op_id`` alone in this worker from now on (bounded memory): nothing could be
        recorded for it, not even that its write was refused. Source: issue 35 item 2."""
        with self._lock:
            self._set_aside[op_id] = None
            while len(self._set_aside) > SET_ASIDE:
                self._set_aside.popitem(last=False)

    def is_set_aside(self, op_id: UUID) -> bool:
        """Whether this worker set ``op_id`` aside (:meth:`set_aside`)."""
        return op_id in self._set_aside

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
