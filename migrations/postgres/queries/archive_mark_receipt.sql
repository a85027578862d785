-- Archives.archive_receipts_remove: an archived receipt generation removed (1) or kept whole (2).
UPDATE {schema}.opledger_archived_receipts SET removed = %s WHERE receipt_id = %s AND segment = %s
