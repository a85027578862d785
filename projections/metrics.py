"""The metrics projection: counters and latency histograms folded from the event log.

Each ledger event is compared with its operation's state just before it (the pure rule is
``projections.metric_deltas``; :class:`MetricsFold` keeps the states) and turns into increments
of named counters and histogram parts. A batch's increments commit with the position it reaches,
and the position only moves from where the batch started (``MetricsStore.write``), so a crash, a
replay or a racing writer never double-counts, and a rebuild (every event again, into totals that
replace the rows in one transaction) gives the live run's numbers, archived operations included
(:func:`carried_forward`). Gauges that depend on "now" (queue depth, oldest pending age, the
attention queue) are read from the status view at scrape time, never stored
(``adapters.http.metrics``).

Source: DESIGN §1 item 6 and §8; issue 13 item 1; docs/adr/0010-archives.md.
"""

from __future__ import annotations

import json
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
from ledger.receipts import Receipt
from migrations.drivers import archives_of, driver_of
from projections.loading import record_decoder
from projections.metric_deltas import RECEIPT_TOPICS, RECEIPTS_STUCK, WINDOW_TOPICS, labels_of, metric_deltas
from projections.metrics_store import LabelKey, MetricsStore, PositionMovedError
from projections.rows import read_topics
from projections.view import Lease

log = structlog.get_logger("opledger.metrics")

PROJECTION_NAME = "metrics"
DEFAULT_BATCH_SIZE = 2000
DEFAULT_CACHE_SIZE = 10_000
DEFAULT_IDLE_SECONDS = 0.5


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
        self._ids: dict[Any, UUID] = {}
        self.fold = MetricsFold(app, self.config.cache_size)

    def run_once(self) -> int:
        """Fold and commit one batch after the stored position.

        Returns:
            How many notifications were applied (0 when caught up, or another writer moved first).
        """
        if self.lease is not None and not self.store.view.lead(self.lease, self.config.lease_seconds):
            self.fold.forget()
            return 0
        start = self.store.position(PROJECTION_NAME, self.app.name)
        records = self._read(start, self.config.batch_size)
        if not records:
            return 0
        increments = self.fold.fold(records)
        try:
            self.store.write(increments, projection=PROJECTION_NAME, upstream=self.app.name,
                             start=start, position=records[-1][0])
        except PositionMovedError:
            self.fold.forget()  # folded from a position that is no longer ours
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
        position, in one transaction; the old numbers serve until then. The totals start from
        what archive segments carried forward for the operations they moved out of the log
        (:func:`carried_forward`), so a rebuild after archiving gives the numbers before it.

        Args:
            progress: called with the notifications folded so far after each batch.

        Returns:
            The notifications folded.
        """
        self.fold.reset()
        totals: dict[LabelKey, float] = defaultdict(float, carried_forward(self.app))
        position, folded = 0, 0
        while records := self._read(position, self.config.batch_size):
            for key, value in self.fold.fold(records).items():
                totals[key] += value
            position, folded = records[-1][0], folded + len(records)
            if progress is not None:
                progress(folded)
        self.store.replace(totals, projection=PROJECTION_NAME, upstream=self.app.name, position=position)
        self.fold.forget()
        return folded

    def run(self, stop: threading.Event) -> None:
        """Follow the log until ``stop`` is set (the loop only; the work is ``run_once``)."""
        while not stop.is_set():
            try:
                if self.run_once() < self.config.batch_size:
                    stop.wait(self.config.idle_seconds)
            except Exception:
                log.exception("metrics projection failed; retrying")
                self.fold.forget()
                stop.wait(1.0)

    def _read(self, position: int, limit: int) -> list[tuple[int, UUID, int, str, bytes]]:
        if len(self._ids) > 100_000:
            self._ids.clear()
        return driver_of(self.app).records_list_after(position, limit,
                                                      read_topics() + WINDOW_TOPICS + RECEIPT_TOPICS, self._ids)


class MetricsFold:
    """Ledger records folded into metric increments (:func:`metric_deltas` of each event), with
    the operation states kept between records so each event is compared with the state before it.

    Args:
        app: the host application (its mapper decodes; its repository answers a state the cache
            does not hold).
        cache_size: operations (and call windows) whose latest state is kept.
    """

    def __init__(self, app: LedgerApplication, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        self.app = app
        self.cache_size = cache_size
        self._decode = record_decoder(app)
        self._cache: OrderedDict[UUID, Operation] = OrderedDict()
        self._scopes: OrderedDict[UUID, str] = OrderedDict()  # call window id -> its budget scope
        self.skipped: set[UUID] = set()
        """Operations with a record that does not decode: the status projection puts them on
        the attention queue; their later events are not counted here."""

    def forget(self) -> None:
        """Drop the kept states (the log moved under them: they are read again when needed)."""
        self._cache.clear()

    def reset(self) -> None:
        """Start over, as for a rebuild: no kept states, nothing skipped."""
        self._cache.clear()
        self.skipped.clear()

    def fold(self, records: Iterable[tuple[int, UUID, int, str, bytes]]) -> dict[LabelKey, float]:
        """The increments of ``records`` (``(position, aggregate id, version, topic, state)``
        of operations, call windows and receipts, in log order)."""
        increments: dict[LabelKey, float] = defaultdict(float)
        for _position, op_id, version, topic, state in records:
            if op_id in self.skipped:
                continue
            if topic in WINDOW_TOPICS:
                self._fold_window(increments, op_id, version, topic, state)
                continue
            if topic in RECEIPT_TOPICS:
                self._fold_receipt(increments, op_id, version, topic, state)
                continue
            try:
                self.add(increments, self._decode(op_id, version, topic, state))
            except CorruptRecordError as exc:
                log.warning("metrics skip an operation with a record that does not decode",
                            operation_id=str(op_id), error=str(exc))
                self.skipped.add(op_id)
                self._cache.pop(op_id, None)
        return dict(increments)

    def add(self, increments: dict[LabelKey, float], event: Any) -> None:
        """Add what one decoded operation ``event`` makes (:func:`metric_deltas`) to
        ``increments``, compared with its operation's state before it, which it then keeps.

        Raises:
            CorruptRecordError: an earlier record of the operation, read to rebuild its state
                when it is not kept, does not decode.
        """
        op_id, version = event.originator_id, event.originator_version
        before = self._before(op_id, version)
        after = event.mutate(None if before is None else before.detached_copy())
        integration, tenant, mode = labels_of(after)
        for name, detail, value in metric_deltas(before, event, after):
            increments[(name, integration, tenant, mode, detail)] += value
        self._cache[op_id] = after
        self._cache.move_to_end(op_id)
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

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
        if len(self._scopes) > self.cache_size:
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


def history_increments(app: LedgerApplication,
                       records: Iterable[tuple[UUID, int, str, bytes]]) -> dict[LabelKey, float]:
    """What a rebuild would fold from complete histories: ``records`` are ``(aggregate id,
    version, topic, state)`` of operations and receipts, each aggregate's from version 1 in
    order (an archive segment's). Records the projection does not fold are left out; a sum of
    zero stays (the live rows keep it, so a rebuild must give it too).

    Source: docs/adr/0010-archives.md, "As built" (the metrics carried forward).
    """
    folded = set(read_topics()) | set(RECEIPT_TOPICS)
    fold = MetricsFold(app, cache_size=1)  # one history at a time: only the one being folded is needed
    return fold.fold((0, aggregate_id, version, topic, state) for aggregate_id, version, topic, state in records
                     if topic in folded)


def carried_forward(app: LedgerApplication) -> dict[LabelKey, float]:
    """The metric increments every recorded archive segment carried forward for what it moved
    out of the log (its summary's ``metrics``, ``adapters.archive_run.summary_of``), summed.
    A segment recorded before they were carried has none: a rebuild undercounts its operations.
    """
    totals: dict[LabelKey, float] = defaultdict(float)
    for segment in archives_of(app).archive_segments():
        for name, integration, tenant, mode, detail, value in json.loads(segment.summary).get("metrics", []):
            totals[(name, integration, tenant, mode, detail)] += value
    return dict(totals)
