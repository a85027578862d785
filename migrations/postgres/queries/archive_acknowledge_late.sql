-- Archives.archive_late_acknowledge: an operator saw an archived operation's late records.
UPDATE {schema}.opledger_archive_late SET acknowledged_at = %s, acknowledged_by = %s, evidence = %s
WHERE operation_id = %s AND acknowledged_at IS NULL
