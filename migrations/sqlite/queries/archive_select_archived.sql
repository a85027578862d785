-- Archives.archive_lookup: the segment and final status of archived ids ({ids} is a list of ?).
SELECT operation_id, segment, status FROM opledger_archived_operations WHERE operation_id IN ({ids})
