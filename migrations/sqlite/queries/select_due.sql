-- StatusView.due: operations with work due at or before now, earliest first.
SELECT operation_id, version, tenant, integration, integration_version, delivery_mode, status, execution, settlement, approval, attempts, max_attempts, epoch, worker_id, lease_expires_at, next_due_at, remote_id, attention, disposition, failure_category, ambiguity_reason, cancel_requested, source_entity_type, source_entity_id, source_entity_version, effect_index, created_at, updated_at FROM opledger_operation_status
WHERE next_due_at IS NOT NULL AND next_due_at <= :now
ORDER BY next_due_at
LIMIT :limit
