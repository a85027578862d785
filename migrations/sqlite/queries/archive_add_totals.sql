-- Archives.archive_remove: add the operations whose status rows it deleted to the carried-forward totals.
INSERT INTO opledger_archive_totals (status, integration, tenant, delivery_mode, operations)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (status, integration, tenant, delivery_mode)
DO UPDATE SET operations = opledger_archive_totals.operations + excluded.operations
