-- Archives.archive_remove: an archived operation's status row, if it is the version archived.
DELETE FROM {schema}.opledger_operation_status WHERE operation_id = %s AND version <= %s
