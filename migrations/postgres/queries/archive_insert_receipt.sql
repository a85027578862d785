-- Archives.archive_record: one archived receipt generation's index row (still to be removed).
INSERT INTO {schema}.opledger_archived_receipts (receipt_id, segment, version, archived_at)
VALUES (%s, %s, %s, %s) ON CONFLICT (receipt_id, segment) DO NOTHING
