-- StatusView.search: newest first, filtered (OperationFilter; a None filter matches all), after a
-- keyset cursor. A status filter also matches the execution outcome, so 'failed' finds failures
-- whose outcome is settled.
SELECT operation_id, version, tenant, integration, integration_version, delivery_mode, status, execution, settlement, approval, attempts, max_attempts, epoch, worker_id, lease_expires_at, next_due_at, remote_id, attention, disposition, failure_category, ambiguity_reason, cancel_requested, source_entity_type, source_entity_id, source_entity_version, effect_index, created_at, updated_at, attention_detail FROM opledger_operation_status
WHERE (%(status)s::text IS NULL OR status = %(status)s OR execution = %(status)s)
  AND (%(integration)s::text IS NULL OR integration = %(integration)s)
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND (%(attention)s::text IS NULL OR attention = %(attention)s OR (%(attention)s = '*' AND attention IS NOT NULL))
  AND (%(outcome)s::text IS NULL OR execution = %(outcome)s)
  AND (%(approval)s::text IS NULL OR approval = %(approval)s)
  AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
  AND (%(entity_type)s::text IS NULL OR source_entity_type = %(entity_type)s)
  AND (%(entity_id)s::uuid IS NULL OR source_entity_id = %(entity_id)s)
  AND (%(after_at)s::timestamptz IS NULL OR created_at < %(after_at)s
       OR (created_at = %(after_at)s AND operation_id > %(after_id)s::uuid))
ORDER BY created_at DESC, operation_id
LIMIT %(limit)s
