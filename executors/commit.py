"""Commit many operations' changes in one transaction, without weakening fencing.

Each change is a function that runs commands on an operation (and may return other aggregates,
such as the source entity, to save with it). All changes of a batch are saved with one
``save()``: one commit instead of N. If any aggregate's version conflicts, the library rejects
the whole transaction and drops every pending event (DESIGN §11), so the batch is reloaded in one
query and every change decided again: a change whose epoch went stale now raises and is
rejected, the others commit together. Only a batch that keeps conflicting is committed one by one. Fencing is the aggregate's and the database's, never this module's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence
from uuid import UUID

import structlog
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError

from ledger.application import LedgerApplication
from ledger.errors import LedgerError
from ledger.operation import Operation
from projections.loading import load_aggregates

log = structlog.get_logger("opledger.commit")

BATCH_TRIES = 3
"""Whole-batch attempts (the first, then after reloading on a conflict) before one by one."""

Change = Callable[[Operation], Sequence[Aggregate]]
"""Runs commands on the operation; returns other aggregates to save in the same transaction.
Raising a ``LedgerError`` rejects the change (stale epoch, illegal transition...)."""


@dataclass
class CommitResult:
    """What a batch commit did.

    Attributes:
        committed: operation id to the operation as committed (use these instances from now on).
        rejected: operation id to the reason its change was not committed.
        events: names of the ledger events committed, in order, for counting.
        conflicts: how many batch saves hit a version conflict (another writer got there first).
    """

    committed: dict[UUID, Operation] = field(default_factory=dict)
    rejected: dict[UUID, str] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    conflicts: int = 0


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
            try:
                batch.extend([op, *change(op)])
                applied.append((op, change))
            except LedgerError as exc:
                result.rejected[op.id] = str(exc)
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
        for op, _ in applied:
            result.committed[op.id] = op
        result.events.extend(names)
        return result
    for op, change in pending:
        _commit_alone(app, op.id, change, result)
    return result


def _commit_alone(app: LedgerApplication, op_id: UUID, change: Change, result: CommitResult) -> None:
    try:
        fresh = app.get_operation(op_id)
        extra = change(fresh)
        names = [type(e).__name__ for e in fresh.pending_events]
        app.save(fresh, *extra)
    except (LedgerError, IntegrityError) as exc:
        result.rejected[op_id] = str(exc) or type(exc).__name__
        return
    result.committed[op_id] = fresh
    result.events.extend(names)
