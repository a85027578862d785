-- StatusView.due: operations with work due at or before now, earliest first; only what a worker
-- needs to choose what to load (it loads the operations themselves from the event store).
SELECT operation_id, version, execution, settlement, cancel_requested FROM opledger_operation_status
WHERE next_due_at IS NOT NULL AND next_due_at <= %(now)s
ORDER BY next_due_at
LIMIT %(limit)s
