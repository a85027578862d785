-- MetricsStore.gauges: operations by status and labels (queue depth), read at scrape time.
SELECT status, integration, tenant, delivery_mode, COUNT(*) FROM opledger_operation_status
GROUP BY status, integration, tenant, delivery_mode
