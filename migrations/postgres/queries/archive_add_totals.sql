-- Archives.archive_remove: add the operations whose status rows it deleted to the carried-forward totals.
INSERT INTO {schema}.opledger_archive_totals AS t (status, integration, tenant, delivery_mode, operations)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (status, integration, tenant, delivery_mode)
DO UPDATE SET operations = t.operations + excluded.operations
