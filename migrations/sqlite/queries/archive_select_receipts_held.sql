-- Archives.archive_receipts_held: which of these receipts have an archived generation whose
-- records are still in the store (not removed yet, or kept whole): never selected again
-- ({ids} is a list of ?).
SELECT DISTINCT receipt_id FROM opledger_archived_receipts WHERE removed <> 1 AND receipt_id IN ({ids})
