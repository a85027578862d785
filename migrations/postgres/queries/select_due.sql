-- StatusView.due: operations with work due at or before now, earliest first; only what a worker
-- needs to choose what to load (it loads the operations themselves from the event store).
-- The first column is the database's time, read in this statement: a worker following the
-- database's clock (%(now)s NULL) compares with it, and corrects its own clock by it (DESIGN §7).
-- One row of NULLs after it when nothing is due, so the time comes back either way. The lateral
-- subquery keeps the partial index on next_due_at usable (the time is read once, not per row).
SELECT t.database_now, s.operation_id, s.version, s.execution, s.settlement, s.cancel_requested
FROM (SELECT clock_timestamp() AS database_now) AS t
LEFT JOIN LATERAL (
    SELECT operation_id, version, execution, settlement, cancel_requested, next_due_at
    FROM opledger_operation_status
    WHERE next_due_at IS NOT NULL AND next_due_at <= COALESCE(%(now)s::timestamptz, t.database_now)
    ORDER BY next_due_at
    LIMIT %(limit)s
) AS s ON true
ORDER BY s.next_due_at
