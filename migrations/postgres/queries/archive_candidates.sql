-- Archives.archive_candidates: closed status rows last changed before the cutoff, not archived
-- yet, after a keyset (updated_at, operation_id), oldest first. ledger.retention.is_archivable
-- confirms each one.
SELECT s.operation_id, s.version, s.integration, s.status, s.execution, s.settlement, s.disposition,
       s.attention, s.updated_at
FROM {schema}.opledger_operation_status s
WHERE s.attention IS NULL AND s.settlement <> 'pending'
  AND (s.settlement IN ('settled', 'not_required') OR s.disposition = 'abandoned')
  AND s.updated_at < %s
  AND (s.updated_at, s.operation_id) > (%s, %s)
  AND NOT EXISTS (SELECT 1 FROM {schema}.opledger_archived_operations a WHERE a.operation_id = s.operation_id)
ORDER BY s.updated_at, s.operation_id
LIMIT %s
