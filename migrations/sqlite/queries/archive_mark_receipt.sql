-- Archives.archive_receipts_remove: an archived receipt generation removed (1) or kept whole (2).
UPDATE opledger_archived_receipts SET removed = ? WHERE receipt_id = ? AND segment = ?
