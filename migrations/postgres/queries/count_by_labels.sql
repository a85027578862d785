-- MetricsStore.gauges: operations by status and labels (queue depth), from the counters the
-- status table's triggers keep (schema 0009).
SELECT status, integration, tenant, delivery_mode, operations FROM opledger_status_counts WHERE operations <> 0
