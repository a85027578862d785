-- Archives.archive_remove: an archived operation's status row, if it is the version archived.
DELETE FROM opledger_operation_status WHERE operation_id = ? AND version <= ?
RETURNING status, integration, tenant, delivery_mode
