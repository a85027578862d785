"""What one ledger event adds to the metrics: the counters and histograms, their help text and
labels, and ``metric_deltas``, the pure rule the metrics projection folds (``projections.metrics``)
and the archive run carries forward for what it moves out (``adapters.archive_run``).

Source: DESIGN §1 item 6 and §8; issue 13 item 1; docs/adr/0010-archives.md.
"""

from __future__ import annotations

import re
from typing import Any

from ledger.budgets import CallWindow, scope_level
from ledger.operation import Operation
from ledger.outcomes import FailureCategory
from ledger.receipts import Receipt
from ledger.refusals import WriteKind
from ledger.status import ExecutionState
from ledger.topics import topics_of

LATENCY_BUCKETS_SECONDS: tuple[float, ...] = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400)
"""Upper bounds of every latency histogram's buckets, seconds (``+Inf`` is added)."""

COUNTERS: dict[str, str] = {
    "opledger_operations_intended": "operations intended (co-committed with their source event)",
    "opledger_attempts": "attempts started (AttemptStarted: recorded before egress)",
    "opledger_outcomes": "execution outcomes reached, by outcome (an operator's resolution counts too)",
    "opledger_retries": "retries scheduled, by failure category",
    "opledger_ambiguous": "operations that became ambiguous, by reason",
    "opledger_lease_takeovers": "claims that took over an expired lease",
    "opledger_cancel_failures": "cancellations the provider refused or could not confirm",
    "opledger_budget_exhausted": "operations that used their attempt budget",
    "opledger_settlement_failures": "settlement attempts that failed and will be retried",
    "opledger_settlements_blocked": "settlements that kept failing and wait for an operator",
    "opledger_settled": "outcomes settled into their source entity",
    "opledger_attention_entries": "times an operation went onto the attention queue, by reason",
    "opledger_budget_calls": "calls given out by call budgets (sends and lookups), by budget level; the "
                             "global level has no integration label, the integration level no tenant",
    "opledger_budget_waits": "times an operation waited for a call budget (BudgetWaited), by the level that limited it",
    "opledger_writes_refused": "writes the database refused for one operation alone (WriteRefused: a trigger, a "
                               "constraint, a row-level security policy), by what the write was for",
}
"""Counter names (exposed with ``_total``) and their help text."""

HISTOGRAMS: dict[str, str] = {
    "opledger_claim_latency_seconds": "intent to first claim",
    "opledger_dispatch_latency_seconds": "attempt recorded (right after its claim) to the attempt's outcome",
    "opledger_accepted_to_terminal_seconds": "provider accepted to terminal outcome",
    "opledger_settlement_latency_seconds": "execution outcome to settled",
}
"""Histogram names and their help text; stored as ``_bucket`` (detail: the bound), ``_sum``, ``_count``."""

DETAIL_LABEL: dict[str, str] = {
    "opledger_outcomes": "outcome", "opledger_retries": "category", "opledger_ambiguous": "reason",
    "opledger_attention_entries": "reason", "opledger_budget_calls": "level", "opledger_budget_waits": "level",
    "opledger_writes_refused": "kind",
}
"""The counters with a label of their own, and its name."""

_TERMINAL = {ExecutionState.SUCCEEDED, ExecutionState.FAILED, ExecutionState.AMBIGUOUS, ExecutionState.CANCELLED}
_CATEGORIES = frozenset(c.value for c in FailureCategory)
_WRITE_KINDS = frozenset(k.value for k in WriteKind)
_BOUNDED = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_COUNTED: dict[type, str] = {
    Operation.AttemptStarted: "opledger_attempts", Operation.CancelFailed: "opledger_cancel_failures",
    Operation.SettlementFailed: "opledger_settlement_failures",
    Operation.SettlementBlocked: "opledger_settlements_blocked", Operation.Settled: "opledger_settled",
    Operation.BudgetExhausted: "opledger_budget_exhausted",
}
"""Events counted one for one, by the counter they add to."""
WINDOW_TOPICS = topics_of([CallWindow.Opened, CallWindow.CallTaken])
"""Call budget window events, folded into ``opledger_budget_calls``."""
RECEIPT_TOPICS = topics_of([Receipt.ReceiptRecoveryStopped, Receipt.ReceiptResolved])
"""Receipt events that put a receipt on the attention queue and take it off, folded into
:data:`RECEIPTS_STUCK`."""
ARCHIVE_LATE = "opledger_archive_late_records"
"""Late records of archived operations no operator acknowledged yet, by integration: the attention
queue's ``late_after_archive`` (ADR 0010 §4), read from the archive tables at each scrape."""
RECEIPTS_STUCK = "opledger_receipts_stuck"
"""Receipts recovery gave up on, one row per receipt: name, the command (in the integration
column), no tenant or mode, the receipt id as detail; 1 while it is stuck, 0 after. Read by the
attention queue (``adapters.receipt_attention``) and summed by command into the gauge of that
name (``adapters.http.metrics``). Issue 31 item 4."""
_OUTCOME_EVENTS = (Operation.Succeeded, Operation.Failed, Operation.Ambiguous, Operation.Accepted,
                   Operation.RetryScheduled, Operation.BudgetExhausted)


def bounded(value: str | None, known: frozenset[str] | None = None) -> str:
    """A label value of bounded cardinality: ``value`` when it is one of ``known`` (or, without
    ``known``, a short lower-case code), else ``other``."""
    if value is None:
        return "none"
    if known is not None:
        return value if value in known else "other"
    return value if _BOUNDED.match(value) else "other"


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _observe(out: list[tuple[str, str, float]], name: str, seconds: float) -> None:
    seconds = max(seconds, 0.0)  # a clock stepping back never makes a negative latency
    bound = next((b for b in LATENCY_BUCKETS_SECONDS if seconds <= b), float("inf"))
    out += [(f"{name}_bucket", _le(bound), 1.0), (f"{name}_sum", "", seconds), (f"{name}_count", "", 1.0)]


def metric_deltas(before: Operation | None, event: Any, after: Operation) -> list[tuple[str, str, float]]:
    """The metric increments one event makes, from its operation's state before and after it.

    Args:
        before: the operation just before ``event`` (None for ``Intended``).
        event: a ledger event of the operation.
        after: the operation with ``event`` folded in.

    Returns:
        ``(name, detail, increment)`` triples; histogram observations as one ``_bucket`` (the
        bucket the value falls in, not cumulative), ``_sum`` and ``_count`` each. Pure: the same
        events always give the same increments (so a rebuild equals the live run).

    Source: issue 13 item 1.
    """
    out: list[tuple[str, str, float]] = []
    at = event.timestamp
    if before is None:
        return [("opledger_operations_intended", "", 1.0)]
    counter = _COUNTED.get(type(event))
    if counter is not None:
        out.append((counter, "", 1.0))
    if isinstance(event, Operation.Claimed):
        if before.epoch == 0:
            _observe(out, "opledger_claim_latency_seconds", (at - before.created_on).total_seconds())
        if event.takeover:
            out.append(("opledger_lease_takeovers", "", 1.0))
    elif isinstance(event, Operation.Settled):
        _observe(out, "opledger_settlement_latency_seconds", (at - before.state_entered_at).total_seconds())
    elif (labelled := _labelled(event)) is not None:
        out.append((*labelled, 1.0))
    if isinstance(event, _OUTCOME_EVENTS) and before.execution is ExecutionState.DISPATCHING:
        _observe(out, "opledger_dispatch_latency_seconds", (at - before.state_entered_at).total_seconds())
    if after.execution is not before.execution and after.execution in _TERMINAL:
        _outcome(out, before, after, at)
    reason = after.attention
    if reason is not None and reason != before.attention:
        out.append(("opledger_attention_entries", bounded(reason), 1.0))
    return out


def _labelled(event: Any) -> tuple[str, str] | None:
    """The counter with a label of its own that ``event`` adds one to, and the label's value."""
    if isinstance(event, Operation.RetryScheduled):
        return "opledger_retries", bounded(event.category, _CATEGORIES)
    if isinstance(event, Operation.BudgetWaited):
        return "opledger_budget_waits", scope_level(event.scope).value
    if isinstance(event, Operation.WriteRefused):
        return "opledger_writes_refused", bounded(event.kind, _WRITE_KINDS)
    return None


def _outcome(out: list[tuple[str, str, float]], before: Operation, after: Operation, at: Any) -> None:
    # An execution outcome was reached (``after.execution`` terminal, changed by this event).
    out.append(("opledger_outcomes", after.execution.value, 1.0))
    if after.execution is ExecutionState.AMBIGUOUS:
        out.append(("opledger_ambiguous", bounded(after.ambiguity_reason), 1.0))
    if before.execution is ExecutionState.ACCEPTED:
        _observe(out, "opledger_accepted_to_terminal_seconds", (at - before.state_entered_at).total_seconds())


def labels_of(op: Operation) -> tuple[str, str, str]:
    """``(integration, tenant, delivery_mode)`` of an operation, as metric labels."""
    return op.integration_name, op.tenant, op.delivery_mode.value
