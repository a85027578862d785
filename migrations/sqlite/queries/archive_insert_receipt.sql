-- Archives.archive_record: one archived receipt generation's index row (still to be removed).
INSERT INTO opledger_archived_receipts (receipt_id, segment, version, archived_at)
VALUES (?, ?, ?, ?) ON CONFLICT (receipt_id, segment) DO NOTHING
