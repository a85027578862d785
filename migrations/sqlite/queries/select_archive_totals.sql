-- StatusView.counts, MetricsStore.gauges: archived operations' carried-forward totals, added in.
SELECT status, integration, tenant, delivery_mode, operations FROM opledger_archive_totals
