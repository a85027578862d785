"""Deadlines and cancellation of unleased operations: the two kinds of due work that end an
operation without egress (``ledger.decisions.ExceedDeadline`` and ``Cancel``).

The due-work pass (``executors.claim``) finds them with every other kind of due work, in the
same query and commit; this module says what each records. ``DeadlineExceeded`` is ``failed``
when no attempt may have applied, else ``ambiguous`` (the aggregate decides, from its facts).

Source: DESIGN §4 invariant 6; docs/adr/0002-executor-services.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from eventsourcing.domain import Aggregate

from executors.commit import Change
from ledger.operation import Operation


def exceed_deadline_change(now: datetime) -> Change:
    """The change recording that the operation's current deadline passed at ``now`` (UTC)."""

    def change(op: Operation) -> Sequence[Aggregate]:
        op.exceed_deadline(now=now)
        return []

    return change


def cancel_change(now: datetime) -> Change:
    """The change recording ``Cancelled`` for an unleased operation whose cancellation was
    requested (a leased one is cancelled by its holder, at claim time)."""

    def change(op: Operation) -> Sequence[Aggregate]:
        op.cancel(now=now, epoch=None)
        return []

    return change


def remote_unknown_change(now: datetime) -> Change:
    """The change recording that the ``accepted`` deadline passed with the provider still
    running (``RemoteOverdue``): attention ``remote_unknown``, never an outcome (ADR 0004)."""

    def change(op: Operation) -> Sequence[Aggregate]:
        op.mark_remote_unknown(now=now)
        return []

    return change
