-- MetricsStore.gauges: operations on the attention queue now, by reason and labels.
SELECT attention, integration, tenant, delivery_mode, COUNT(*) FROM opledger_operation_status
WHERE attention IS NOT NULL
GROUP BY attention, integration, tenant, delivery_mode
