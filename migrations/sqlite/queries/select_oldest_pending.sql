-- MetricsStore.gauges: when the oldest pending operation of each label set was intended.
SELECT integration, tenant, delivery_mode, MIN(created_at) FROM opledger_operation_status
WHERE status = 'pending'
GROUP BY integration, tenant, delivery_mode
