-- MetricsStore.totals
SELECT name, integration, tenant, delivery_mode, detail, value FROM opledger_metrics
