-- Archives.archive_lookup: the segment and final status of archived ids.
SELECT operation_id, segment, status FROM {schema}.opledger_archived_operations WHERE operation_id = ANY(%s)
