"""Writes of ``opledger serve`` (callbacks, operator actions) and the operator CLI that the
database refuses for one operation alone (issue 35 item 3): the request is answered with a
problem (``WriteRefusedError``: 422 ``write_refused``), the operation records ``WriteRefused``
when it can (attention ``write_refused``, counted by kind), and the server goes on. Whose
problem a refusal is, is ``ledger.refusals.refusal_scope``'s rule, as in the worker: only a
store that refuses the probe writes too (``projections.probe``) is the store's, and its error
propagates as before (a 500, or a 503 while it is unreachable).

Source: issue 35 item 3; docs/operations.md ("Writes the database refuses").
"""

from __future__ import annotations

from datetime import datetime

import structlog
from eventsourcing.domain import Aggregate

from ledger.application import LedgerApplication
from ledger.errors import WriteRefusedError
from ledger.facts import describe
from ledger.operation import Operation
from ledger.outages import SaveFault, save_fault
from ledger.refusals import RefusalScope, WriteKind, refusal_scope, refusal_text
from projections.probe import probe_refused

log = structlog.get_logger("opledger.refusals")


def save_refusable(app: LedgerApplication, op: Operation, kind: WriteKind, now: datetime,
                   *others: Aggregate) -> None:
    """Save ``op`` (with ``others``) in one ``save()``; a write the database refuses for it
    alone becomes :class:`WriteRefusedError`, after ``WriteRefused`` is recorded on it.

    Args:
        app: the host application.
        op: the operation whose new events are saved.
        kind: what the write is for (``callback``, ``operator``, ``cancellation``).
        now: UTC-aware instant of the ``WriteRefused`` fact.
        others: aggregates saved in the same transaction.

    Raises:
        WriteRefusedError: the database refused the write and accepts a probe write.
        eventsourcing.persistence.IntegrityError: a version conflict (decide again).
        Exception: what ``save()`` raised otherwise: an outage, or a store that refuses every write.

    Source: issue 35 item 3; docs/adr/0002-executor-services.md ("Refused writes").
    """
    try:
        app.save(op, *others)
    except Exception as exc:
        if save_fault(exc) is not SaveFault.REFUSED:
            raise
        # Nothing else was written with it: only the probe tells the store's refusal from the row's.
        if refusal_scope(accepted=0, probe_refused=probe_refused(app)) is RefusalScope.STORE:
            raise
        error = refusal_text(exc)
        _note(app, op, kind, error, now)
        raise WriteRefusedError(op.id, kind.value, error) from None


def _note(app: LedgerApplication, op: Operation, kind: WriteKind, error: str, now: datetime) -> None:
    """Record ``WriteRefused`` on ``op`` as stored; best effort (the answer says it anyway)."""
    try:
        fresh = app.get_operation(op.id)
        fresh.note_refused_write(now=now, kind=kind, error=error)
        app.save(fresh)
    except Exception as exc:  # the store refuses that too, or moved on: the problem answer remains
        log.warning("a refused write could not be noted on its operation", operation_id=str(op.id),
                    kind=kind.value, error=describe(exc))
        return
    log.error("write refused for one operation", operation_id=str(op.id), kind=kind.value, error=error)
