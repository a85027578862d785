-- StatusView.finish_rebuild: count the swapped-in table, once (its triggers count from then on).
INSERT INTO opledger_status_counts (status, integration, tenant, delivery_mode, operations)
SELECT status, integration, tenant, delivery_mode, COUNT(*) FROM {main}
GROUP BY status, integration, tenant, delivery_mode
