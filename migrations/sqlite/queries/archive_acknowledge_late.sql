-- Archives.archive_late_acknowledge: an operator saw an archived operation's late records.
UPDATE opledger_archive_late SET acknowledged_at = ?, acknowledged_by = ?, evidence = ?
WHERE operation_id = ? AND acknowledged_at IS NULL
