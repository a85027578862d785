"""``GET /metrics``: the metrics read model and the status view's gauges in Prometheus text format.

Counters and histograms come from the metrics projection's rows (``projections.metrics``);
queue depth, the attention queue and the oldest pending age are read from the status view at
scrape time. Labels are ``integration``, ``tenant`` and ``delivery_mode`` (plus a metric's own,
e.g. ``reason``); tenants beyond the top N by intents fold into ``other``, so a scrape's size is
bounded whatever the number of tenants.

Source: issue 13 item 1; https://prometheus.io/docs/practices/naming/.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from projections.metric_deltas import (
    ARCHIVE_LATE,
    COUNTERS,
    DETAIL_LABEL,
    HISTOGRAMS,
    LATENCY_BUCKETS_SECONDS,
    RECEIPTS_STUCK,
)
from projections.metrics_store import Gauges, LabelKey, MetricsStore

OTHER_TENANT = "other"
DEFAULT_TOP_TENANTS = 20
LABELS = ["integration", "tenant", "delivery_mode"]


class LedgerCollector(Collector):
    """A ``prometheus_client`` collector reading the store at each scrape.

    Args:
        store: the metrics store (and, through it, the status view).
        now: the clock (UTC) for ages.
        top_tenants: tenants shown by name (the most intents first); the rest are ``other``.
    """

    def __init__(self, *, store: MetricsStore, now: Callable[[], datetime],
                 top_tenants: int = DEFAULT_TOP_TENANTS) -> None:
        self.store = store
        self.now = now
        self.top_tenants = top_tenants

    def collect(self) -> Iterator[Metric]:
        totals = self.store.totals()
        gauges = self.store.gauges()
        intents: dict[str, float] = defaultdict(float)
        for (name, _i, tenant, _m, _d), value in totals.items():
            if name == "opledger_operations_intended":
                intents[tenant] += value
        for _s, _i, tenant, _m in gauges.by_status:
            intents.setdefault(tenant, 0.0)
        kept = set(sorted(intents, key=lambda t: (-intents[t], t))[: self.top_tenants])

        def fold(tenant: str) -> str:
            # "" is no tenant (a global or integration call budget's row), never folded.
            return tenant if tenant in kept or not tenant else OTHER_TENANT

        yield from self._counters(totals, fold)
        yield from self._histograms(totals, fold)
        yield from self._gauges(gauges, fold)
        yield _receipts_stuck(totals)
        yield _archive_late(gauges)

    def _counters(self, totals: dict[LabelKey, float], fold: Callable[[str], str]) -> Iterator[Metric]:
        for name, help_text in COUNTERS.items():
            extra = DETAIL_LABEL.get(name)
            family = CounterMetricFamily(name, help_text, labels=LABELS + ([extra] if extra else []))
            values: dict[tuple[str, ...], float] = defaultdict(float)
            for (row_name, integration, tenant, mode, detail), value in totals.items():
                if row_name == name:
                    values[(integration, fold(tenant), mode) + ((detail,) if extra else ())] += value
            for labels, value in sorted(values.items()):
                family.add_metric(list(labels), value)
            yield family

    def _histograms(self, totals: dict[LabelKey, float], fold: Callable[[str], str]) -> Iterator[Metric]:
        bounds = [repr(float(b)) for b in LATENCY_BUCKETS_SECONDS] + ["+Inf"]
        for name, help_text in HISTOGRAMS.items():
            family = HistogramMetricFamily(name, help_text, labels=LABELS)
            buckets: dict[tuple[str, str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
            sums: dict[tuple[str, str, str], float] = defaultdict(float)
            for (row_name, integration, tenant, mode, detail), value in totals.items():
                key = (integration, fold(tenant), mode)
                if row_name == f"{name}_bucket":
                    buckets[key][detail] += value
                elif row_name == f"{name}_sum":
                    sums[key] += value
            for key in sorted(buckets):
                cumulative, running = [], 0.0
                for bound in bounds:
                    running += buckets[key].get(bound, 0.0)
                    cumulative.append((bound, running))
                family.add_metric(list(key), cumulative, sums[key])
            yield family

    def _gauges(self, gauges: Gauges, fold: Callable[[str], str]) -> Iterator[Metric]:
        yield _counted("opledger_operations", "operations by status now (queue depth)", "status",
                       gauges.by_status, fold)
        yield _counted("opledger_attention", "operations on the attention queue now, by reason", "reason",
                       gauges.attention, fold)
        now = self.now()
        oldest = GaugeMetricFamily("opledger_oldest_pending_age_seconds",
                                   "age of the oldest pending operation (intent to now), seconds", labels=LABELS)
        ages: dict[tuple[str, ...], float] = {}
        for (integration, tenant, mode), at in gauges.oldest_pending.items():
            key = (integration, fold(tenant), mode)
            ages[key] = max(ages.get(key, 0.0), max((now - at).total_seconds(), 0.0))
        for labels, value in sorted(ages.items()):
            oldest.add_metric(list(labels), value)
        yield oldest


def _counted(name: str, help_text: str, label: str, counts: dict[tuple[str, str, str, str], int],
             fold: Callable[[str], str]) -> Metric:
    """A gauge of operations counted now by one label of their own (``label``: status, reason)
    and ``LABELS``: ``counts`` maps (value of ``label``, integration, tenant, delivery mode) to a
    number of operations; tenants go through ``fold``, and those folded together are summed."""
    family = GaugeMetricFamily(name, help_text, labels=[label, *LABELS])
    summed: dict[tuple[str, ...], float] = defaultdict(float)
    for (own, integration, tenant, mode), n in counts.items():
        summed[(own, integration, fold(tenant), mode)] += n
    for labels, value in sorted(summed.items()):
        family.add_metric(list(labels), value)
    return family


def _archive_late(gauges: Gauges) -> Metric:
    """``opledger_archive_late_records{integration}``: records that arrived for an operation after
    its records left the hot store (a late callback), kept apart and not yet acknowledged by an
    operator: the attention queue's ``late_after_archive`` (ADR 0010 §4). They have no status
    row, so no tenant or delivery mode; ``opledger_attention`` does not count them."""
    family = GaugeMetricFamily(ARCHIVE_LATE, "late records of archived operations not acknowledged yet "
                                             "(on the attention queue as late_after_archive), by integration",
                               labels=["integration"])
    for integration, n in sorted(gauges.late_after_archive.items()):
        family.add_metric([integration], float(n))
    return family


def _receipts_stuck(totals: dict[LabelKey, float]) -> Metric:
    """``opledger_receipts_stuck{command}``: keyed commands whose receipt recovery gave up on, now
    (the attention queue's ``receipt_stuck``; ``projections.metric_deltas.RECEIPTS_STUCK``). A gauge
    folded from the log rather than read at scrape time: what puts a receipt there and takes it
    off are records, not the clock. Issue 31 item 4."""
    family = GaugeMetricFamily(RECEIPTS_STUCK, "keyed commands whose receipt recovery gave up on "
                                               "(on the attention queue as receipt_stuck), by command",
                               labels=["command"])
    by_command: dict[str, float] = defaultdict(float)
    for (name, command, _t, _m, _receipt), value in totals.items():
        if name == RECEIPTS_STUCK:
            by_command[command] += value
    for command, value in sorted(by_command.items()):
        family.add_metric([command], max(value, 0.0))
    return family


def render(collector: LedgerCollector) -> bytes:
    """The collector's metrics in Prometheus text format (``text/plain; version=0.0.4``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)
