"""The metrics projection: counters and latency histograms folded from the event log.

Each ledger event is compared with its operation's state just before it (``metric_deltas``, pure)
and turns into increments of named counters and histogram parts. A batch's increments commit with
the position it reaches, and the position only moves from where the batch started
(``MetricsStore.write``), so a crash, a replay or a racing writer never double-counts, and a
rebuild (every event again, into totals that replace the rows in one transaction) gives the live
run's numbers. Gauges that depend on "now" (queue depth, oldest pending age, the attention queue)
are read from the status view at scrape time, never stored (``adapters.http.metrics``).

Source: DESIGN §1 item 6 and §8; issue 13 item 1.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import structlog

from ledger.application import LedgerApplication
from ledger.budgets import CallWindow, scope_labels, scope_level
from ledger.errors import CorruptRecordError
from ledger.operation import Operation
from ledger.outcomes import FailureCategory
from ledger.receipts import Receipt
from ledger.refusals import WriteKind
from ledger.status import ExecutionState
from ledger.topics import topics_of
from migrations.drivers import driver_of
from projections.loading import record_decoder
from projections.metrics_store import LabelKey, MetricsStore, PositionMovedError
from projections.rows import read_topics
from projections.view import Lease

log = structlog.get_logger("opledger.metrics")

PROJECTION_NAME = "metrics"
DEFAULT_BATCH_SIZE = 2000
DEFAULT_CACHE_SIZE = 10_000
DEFAULT_IDLE_SECONDS = 0.5
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
_WINDOW_TOPICS = topics_of([CallWindow.Opened, CallWindow.CallTaken])
"""Call budget window events, folded into ``opledger_budget_calls``."""
_RECEIPT_TOPICS = topics_of([Receipt.ReceiptRecoveryStopped, Receipt.ReceiptResolved])
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


@dataclass(frozen=True)
class MetricsProjectionConfig:
    """Tuning for :class:`MetricsProjection`.

    Attributes:
        batch_size: notifications folded and committed per transaction.
        cache_size: operations whose latest state is kept between batches.
        idle_seconds: how long ``run`` waits when the log has nothing new, seconds.
        lease_seconds: leadership lease where several processes could write, seconds.
    """

    batch_size: int = DEFAULT_BATCH_SIZE
    cache_size: int = DEFAULT_CACHE_SIZE
    idle_seconds: float = DEFAULT_IDLE_SECONDS
    lease_seconds: float = 3.0


class MetricsProjection:
    """Keeps ``opledger_metrics`` caught up with the log.

    Args:
        app: the host application whose log holds the ledger events.
        store: where increments and the position are written.
        config: batch and cache sizes.
        holder: where several processes may run it (PostgreSQL), this process's name: only the
            holder of the lease ``projection.metrics.<app>`` folds; the position check keeps
            counts exact even without it.
    """

    def __init__(self, *, app: LedgerApplication, store: MetricsStore,
                 config: MetricsProjectionConfig | None = None, holder: str | None = None) -> None:
        self.app = app
        self.store = store
        self.config = config or MetricsProjectionConfig()
        self.lease = Lease(f"projection.{PROJECTION_NAME}.{app.name}", holder) if holder else None
        self._decode = record_decoder(app)
        self._ids: dict[Any, UUID] = {}
        self._cache: OrderedDict[UUID, Operation] = OrderedDict()
        self._scopes: OrderedDict[UUID, str] = OrderedDict()  # call window id -> its budget scope
        self.skipped: set[UUID] = set()
        """Operations with a record that does not decode: the status projection puts them on
        the attention queue; their later events are not counted here."""

    def run_once(self) -> int:
        """Fold and commit one batch after the stored position.

        Returns:
            How many notifications were applied (0 when caught up, or another writer moved first).
        """
        if self.lease is not None and not self.store.view.lead(self.lease, self.config.lease_seconds):
            self._cache.clear()
            return 0
        start = self.store.position(PROJECTION_NAME, self.app.name)
        records = self._read(start, self.config.batch_size)
        if not records:
            return 0
        increments = self._fold(records)
        try:
            self.store.write(increments, projection=PROJECTION_NAME, upstream=self.app.name,
                             start=start, position=records[-1][0])
        except PositionMovedError:
            self._cache.clear()  # folded from a position that is no longer ours
            return 0
        return len(records)

    def catch_up(self, stop: threading.Event | None = None) -> int:
        """Apply batches until the log is exhausted (or ``stop`` is set); return how many."""
        total = 0
        while stop is None or not stop.is_set():
            applied = self.run_once()
            total += applied
            if applied < self.config.batch_size:
                break
        return total

    def rebuild(self, progress: Callable[[int], object] | None = None) -> int:
        """Fold the whole log again into totals that replace every metric row, with the
        position, in one transaction; the old numbers serve until then.

        Args:
            progress: called with the notifications folded so far after each batch.

        Returns:
            The notifications folded.
        """
        self._cache.clear()
        self.skipped.clear()
        totals: dict[LabelKey, float] = defaultdict(float)
        position, folded = 0, 0
        while records := self._read(position, self.config.batch_size):
            for key, value in self._fold(records).items():
                totals[key] += value
            position, folded = records[-1][0], folded + len(records)
            if progress is not None:
                progress(folded)
        self.store.replace(totals, projection=PROJECTION_NAME, upstream=self.app.name, position=position)
        self._cache.clear()
        return folded

    def run(self, stop: threading.Event) -> None:
        """Follow the log until ``stop`` is set (the loop only; the work is ``run_once``)."""
        while not stop.is_set():
            try:
                if self.run_once() < self.config.batch_size:
                    stop.wait(self.config.idle_seconds)
            except Exception:
                log.exception("metrics projection failed; retrying")
                self._cache.clear()
                stop.wait(1.0)

    def _read(self, position: int, limit: int) -> list[tuple[int, UUID, int, str, bytes]]:
        if len(self._ids) > 100_000:
            self._ids.clear()
        return driver_of(self.app).records_list_after(position, limit,
                                                      read_topics() + _WINDOW_TOPICS + _RECEIPT_TOPICS, self._ids)

    def _fold(self, records: Iterable[tuple[int, UUID, int, str, bytes]]) -> dict[LabelKey, float]:
        increments: dict[LabelKey, float] = defaultdict(float)
        for _position, op_id, version, topic, state in records:
            if op_id in self.skipped:
                continue
            if topic in _WINDOW_TOPICS:
                self._fold_window(increments, op_id, version, topic, state)
                continue
            if topic in _RECEIPT_TOPICS:
                self._fold_receipt(increments, op_id, version, topic, state)
                continue
            try:
                event = self._decode(op_id, version, topic, state)
                before = self._before(op_id, version)
                after = event.mutate(None if before is None else before.detached_copy())
            except CorruptRecordError as exc:
                log.warning("metrics skip an operation with a record that does not decode",
                            operation_id=str(op_id), error=str(exc))
                self.skipped.add(op_id)
                self._cache.pop(op_id, None)
                continue
            integration, tenant, mode = labels_of(after)
            for name, detail, value in metric_deltas(before, event, after):
                increments[(name, integration, tenant, mode, detail)] += value
            self._cache[op_id] = after
            self._cache.move_to_end(op_id)
            if len(self._cache) > self.config.cache_size:
                self._cache.popitem(last=False)
        return dict(increments)

    def _fold_window(self, increments: dict[LabelKey, float], window_id: UUID, version: int, topic: str,
                     state: bytes) -> None:
        """A call budget window's event: each ``CallTaken`` is one call of its level. A window
        record that does not decode is skipped (logged): a count, not an operation, is lost."""
        try:
            event = self._decode(window_id, version, topic, state)
            known = self._scopes.get(window_id)
            if isinstance(event, CallWindow.Opened):
                scope: str = event.scope
            elif known is not None:
                scope = known
            else:
                window: CallWindow = self.app.repository.get(window_id, version=1)
                scope = window.scope
        except CorruptRecordError as exc:
            log.warning("metrics skip a call window record that does not decode", window_id=str(window_id),
                        version=version, error=str(exc))
            return
        self._scopes[window_id] = scope
        self._scopes.move_to_end(window_id)
        if len(self._scopes) > self.config.cache_size:
            self._scopes.popitem(last=False)
        if isinstance(event, CallWindow.CallTaken):
            integration, tenant = scope_labels(scope)
            increments[("opledger_budget_calls", integration, tenant, "", scope_level(scope).value)] += 1.0

    def _fold_receipt(self, increments: dict[LabelKey, float], receipt_id: UUID, version: int, topic: str,
                      state: bytes) -> None:
        """A receipt recovery gave up on (+1), or one that moved on after it did (-1): each
        event names its command, and ``ReceiptResolved`` is recorded only for a stopped receipt,
        so no other record is read. One that does not decode is skipped (logged)."""
        try:
            event = self._decode(receipt_id, version, topic, state)
        except CorruptRecordError as exc:
            log.warning("metrics skip a receipt record that does not decode", receipt_id=str(receipt_id),
                        version=version, error=str(exc))
            return
        step = 1.0 if isinstance(event, Receipt.ReceiptRecoveryStopped) else -1.0
        increments[(RECEIPTS_STUCK, event.scope, "", "", str(receipt_id))] += step

    def _before(self, op_id: UUID, version: int) -> Operation | None:
        """The operation just before its event ``version`` (None before its first)."""
        if version == 1:
            return None
        cached = self._cache.get(op_id)
        if cached is not None and cached.version == version - 1:
            return cached
        op: Operation = self.app.repository.get(op_id, version=version - 1)
        return op
