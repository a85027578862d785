"""The calls a worker has in flight: what each is (``InFlight``) and what came back
(``Finished``), shared by egress, outcome recording, lease renewal, the due-work pass and polling.

Source: DESIGN §7; docs/adr/0002-executor-services.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from urllib.parse import urlsplit
from uuid import UUID

from ledger.declarations import RetryPolicy
from ledger.egress import Adapter, EgressRequest
from ledger.operation import Operation
from ledger.outcomes import CancelOutcome, Outcome, StillRunning

DEADLINE_GRACE_SECONDS = 5.0
"""How long past a call's total deadline its lease may still be renewed, seconds: time to
queue the call, close the connection and record the outcome on a loaded machine."""

FOLLOW_KINDS = frozenset({"poll", "cancel"})
"""Call kinds that follow accepted work (``executors.polling``); the others are attempts'."""


def target_host(target: str | None) -> str | None:
    """The host a call to ``target`` goes to, for the per-host bound: ``scheme://host:port``
    lowercased (RFC 3986 §6.2.2.1: scheme and host are case-insensitive), or None without a
    target or when it does not parse."""
    if not target:
        return None
    try:
        parts = urlsplit(target)
        return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{parts.port or ''}"
    except ValueError:  # a malformed port: the adapter reports it; the host bound does not apply
        return None


@dataclass
class InFlight:
    """A call this worker started and has not recorded yet.

    Attributes:
        op: the operation as committed just before the call (the outcome is recorded on it).
        epoch: the fencing epoch the attempt was started under.
        kind: ``"send"``, ``"lookup"``, or for accepted work ``"poll"`` or ``"cancel"``
            (``executors.polling``, which records their results).
        request: what was handed to the adapter.
        policy: the retry policy the outcome is decided with.
        adapter: the adapter that makes the call.
        lost: the lease could not be renewed; the result, when it comes, is not recorded.
        stale: ``op`` may hold changes a failed commit applied in memory only (the store was
            unreachable); it is reloaded (:meth:`EgressService.refresh`) before it is used.
        started_at: when the attempt was committed (the worker's clock); with the request's
            ``timeout_seconds`` it gives :attr:`deadline_at`.
        send_by: the end of the call budget window the attempt's call was counted in; a call
            not made by then is not made (``executors.budgets``).
        renewal_refused: the database refused this lease's renewal for the operation alone
            (``WriteRefused``, issue 35): it is not renewed again; the outcome is still recorded.
    """

    op: Operation
    epoch: int
    kind: str
    request: EgressRequest
    policy: RetryPolicy
    adapter: Adapter
    lost: bool = False
    stale: bool = False
    started_at: datetime | None = None
    overdue_logged: bool = False
    send_by: datetime | None = None
    renewal_refused: bool = False

    @property
    def deadline_at(self) -> datetime | None:
        """When this call should have ended: its start, plus the request's total deadline
        (``timeout_seconds``, which the adapter enforces), plus ``DEADLINE_GRACE_SECONDS``.
        Leases are not renewed past it (issue 14 item 6); None when the start is unknown."""
        if self.started_at is None:
            return None
        return self.started_at + timedelta(seconds=self.request.timeout_seconds + DEADLINE_GRACE_SECONDS)

    @cached_property
    def host(self) -> str | None:
        """The target host the per-host bound counts this call against."""
        return target_host(self.request.target)


@dataclass(frozen=True, slots=True)
class Finished:
    """A call's result: the operation it was for, and the outcome (``None``: a lookup found
    that the provider never received the operation). A poll's is a ``PollResult``, a cancel's
    a ``CancelOutcome``."""

    operation_id: UUID
    outcome: Outcome | StillRunning | CancelOutcome | None
