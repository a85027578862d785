-- StatusView.search: newest first, filtered (OperationFilter; a None filter matches all), after a
-- keyset cursor. A status filter also matches the execution outcome, so 'failed' finds failures
-- whose outcome is settled.
SELECT operation_id, version, tenant, integration, integration_version, delivery_mode, status, execution, settlement, approval, attempts, max_attempts, epoch, worker_id, lease_expires_at, next_due_at, remote_id, attention, disposition, failure_category, ambiguity_reason, cancel_requested, source_entity_type, source_entity_id, source_entity_version, effect_index, created_at, updated_at, attention_detail FROM opledger_operation_status
WHERE (:status IS NULL OR status = :status OR execution = :status)
  AND (:integration IS NULL OR integration = :integration)
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:attention IS NULL OR attention = :attention OR (:attention = '*' AND attention IS NOT NULL))
  AND (:outcome IS NULL OR execution = :outcome)
  AND (:approval IS NULL OR approval = :approval)
  AND (:since IS NULL OR created_at >= :since)
  AND (:entity_type IS NULL OR source_entity_type = :entity_type)
  AND (:entity_id IS NULL OR source_entity_id = :entity_id)
  AND (:after_at IS NULL OR created_at < :after_at OR (created_at = :after_at AND operation_id > :after_id))
ORDER BY created_at DESC, operation_id
LIMIT :limit
