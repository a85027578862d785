-- StatusView.list: newest first, optionally one status.
SELECT operation_id, version, tenant, integration, integration_version, delivery_mode, status, execution, settlement, approval, attempts, max_attempts, epoch, worker_id, lease_expires_at, next_due_at, remote_id, attention, disposition, failure_category, ambiguity_reason, cancel_requested, source_entity_type, source_entity_id, source_entity_version, effect_index, created_at, updated_at, attention_detail FROM opledger_operation_status
WHERE (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY created_at DESC, operation_id
LIMIT %(limit)s
