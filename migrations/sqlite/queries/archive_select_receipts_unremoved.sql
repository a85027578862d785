-- Archives.archive_receipts_unremoved: archived receipt generations whose records are still to
-- be removed (what a removal interrupted by a kill left).
SELECT receipt_id, segment, version FROM opledger_archived_receipts WHERE removed = 0
ORDER BY receipt_id, segment
LIMIT ?
