-- MetricsStore.write: add a batch's increments, in the same transaction as the position.
INSERT INTO opledger_metrics (name, integration, tenant, delivery_mode, detail, value)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (name, integration, tenant, delivery_mode, detail) DO UPDATE SET value = opledger_metrics.value + EXCLUDED.value
