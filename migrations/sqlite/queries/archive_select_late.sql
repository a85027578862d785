-- Archives.archive_late_list: the records for archived operations no operator acknowledged yet,
-- oldest first.
SELECT operation_id, callback_id, segment, integration, outcome, remote_status, detail, received_at
FROM opledger_archive_late WHERE acknowledged_at IS NULL
ORDER BY received_at, operation_id, callback_id
LIMIT ?
