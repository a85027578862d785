"""What a worker says it did: one log line per outcome and per settlement, and a periodic summary.

An operator watching a worker sees work happen: each committed outcome (``succeeded``,
``failed``, ``ambiguous``, ``accepted``, ``cancelled``, a retry scheduled, the attempt budget
or a deadline used up) and each settlement (settled, blocked) is one structured INFO line named
``operation outcome`` or ``operation settlement``, with the operation id, attempt id, epoch,
integration, outcome, status code and the seconds since the intent, and never a payload value
(the facts it quotes are the stored ones, already bounded and redacted). Every
``summary_interval_seconds`` (``OPLEDGER_LOG_SUMMARY_SECONDS``, default 60; 0: never) a
``worker summary`` line gives what the worker did since the last one and the store's
operations by status, with the oldest pending operation's age where the view can tell it.

Source: issue 34 item 4.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import structlog

from ledger import tracing
from ledger.operation import Operation
from projections.metrics_store import MetricsStore
from projections.view import StatusView

if TYPE_CHECKING:  # executors.commit logs through this module
    from executors.commit import Counts

log = structlog.get_logger("opledger.activity")

DEFAULT_SUMMARY_INTERVAL_SECONDS = 60.0
"""How often a worker logs its summary line, seconds (``OPLEDGER_LOG_SUMMARY_SECONDS``)."""
MAX_TEXT_CHARS = 200
"""A reason or detail quoted on an activity line, at most (characters; the stored fact is longer)."""

_OUTCOMES = {"Succeeded": "succeeded", "Failed": "failed", "Ambiguous": "ambiguous", "Accepted": "accepted",
             "Cancelled": "cancelled", "RetryScheduled": "retry_scheduled", "BudgetExhausted": "budget_exhausted",
             "DeadlineExceeded": "deadline_exceeded"}
_SETTLEMENTS = {"Settled": "settled", "SettlementBlocked": "settlement_blocked"}
_FIELDS = ("attempt_id", "epoch", "status_code", "category", "reason", "detail", "entity_version", "state")


def activity_of(event: Any, op: Operation | None) -> dict[str, Any] | None:
    """The log line of one committed ledger event, or None when it is not an outcome or a
    settlement. Pure.

    Args:
        event: a committed ``Operation`` event.
        op: the operation's committed state (for its integration and intent time), if known.

    Returns:
        ``{"event": "operation outcome" | "operation settlement", "operation_id", "outcome", ...}``
        with the event's own ``attempt_id``, ``epoch``, ``status_code``, ``category``,
        ``reason``, ``detail`` (cut to :data:`MAX_TEXT_CHARS`), ``entity_version`` where it has
        them, and ``integration``, ``seconds_since_intent``, ``trace_id`` and ``span_id`` (the
        intent's producer span, ``ledger.tracing.log_ids``) from ``op``.
    """
    name = type(event).__name__
    outcome = _OUTCOMES.get(name) or _SETTLEMENTS.get(name)
    if outcome is None:
        return None
    line: dict[str, Any] = {"event": "operation settlement" if name in _SETTLEMENTS else "operation outcome",
                            "operation_id": str(event.originator_id), "outcome": outcome}
    for field in _FIELDS:
        value = getattr(event, field, None)
        if value is None or value == "":
            continue
        line[field] = value[:MAX_TEXT_CHARS] if isinstance(value, str) else str(value) if isinstance(value, UUID) \
            else value
    if name == "BudgetExhausted":
        line["outcome"] = "ambiguous" if event.ambiguous else "failed"
        line["reason"] = "budget_exhausted"
    if op is not None:
        line["integration"] = op.integration_name
        line.update(tracing.log_ids(op.traceparent))  # the intent's trace (DESIGN §9)
        created: datetime | None = getattr(op, "created_on", None)
        if created is not None:
            line["seconds_since_intent"] = round((event.timestamp - created).total_seconds(), 3)
    return line


def log_activity(events: Iterable[Any], committed: Mapping[UUID, Operation]) -> None:
    """Log the line of each outcome and settlement among ``events`` (see :func:`activity_of`).

    Args:
        events: the ledger events of one commit, in order.
        committed: the committed operations by id.
    """
    for event in events:
        line = activity_of(event, committed.get(event.originator_id))
        if line is not None:
            what = line.pop("event")
            log.info(what, **line)


def store_gauges(view: StatusView, now: datetime) -> dict[str, Any]:
    """What a summary line reads from the store: operations by status and, where the view keeps
    the metrics read model (SQLite, PostgreSQL), the oldest pending operation's age.

    Args:
        view: the status view.
        now: UTC-aware instant the age is measured to.

    Returns:
        ``{"by_status": {...}, "oldest_pending_age_seconds": 12.5}`` (the age only when known).
    """
    line: dict[str, Any] = {"by_status": view.counts()}
    if (metrics := MetricsStore.of(view)) is not None:
        oldest = min(metrics.gauges().oldest_pending.values(), default=None)
        if oldest is not None:
            line["oldest_pending_age_seconds"] = round((now - oldest).total_seconds(), 1)
    return line


class ActivitySummary:
    """Adds up a worker's cycle counts and logs them every ``interval_seconds`` (monotonic),
    with what ``gauges`` reads from the store (operations by status, the oldest pending age).

    Args:
        interval_seconds: between two summary lines; 0 or less: never.
        gauges: read when a line is due; its dict joins the line (an exception there is logged
            as ``gauges_unavailable`` and the line goes out without them).
        monotonic: the monotonic clock, seconds (tests pass their own).
    """

    def __init__(self, *, interval_seconds: float, gauges: Callable[[], Mapping[str, Any]] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.interval_seconds = interval_seconds
        self.gauges = gauges
        self.monotonic = monotonic
        self.since = monotonic()
        self.totals: Counts | None = None

    def add(self, counts: Counts) -> bool:
        """Add one cycle's counts; log the summary when it is due. Returns whether it logged."""
        self.totals = replace(counts) if self.totals is None else self.totals.add(counts)  # a copy: ours to add to
        now = self.monotonic()
        if self.interval_seconds <= 0 or now - self.since < self.interval_seconds:
            return False
        line: dict[str, Any] = {key: value for key, value in asdict(self.totals).items() if value}
        if self.gauges is not None:
            try:
                line.update(self.gauges())
            except Exception as exc:  # a summary never stops a worker
                line["gauges_unavailable"] = f"{type(exc).__name__}: {exc}"[:MAX_TEXT_CHARS]
        log.info("worker summary", seconds=round(now - self.since, 1), **line)
        self.since, self.totals = now, None
        return True
