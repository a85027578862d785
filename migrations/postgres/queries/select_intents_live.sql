-- select_intents_live: the stored Intended records (the topics given) of the operations a worker
-- may still act on, to read the declaration digest each was recorded under: those whose status
-- row has work due (through the due index) and those after the status projection's position
-- (not projected yet). Bounded by the live work and the projection's lag, not by history.
-- Run at start, never per cycle.
SELECT e.originator_id, e.originator_version, e.topic, e.state
FROM {schema}.opledger_operation_status s
JOIN {table} e ON e.originator_id = s.operation_id
WHERE s.next_due_at IS NOT NULL AND e.topic = ANY(%s)
UNION
SELECT originator_id, originator_version, topic, state FROM {table}
WHERE notification_id > coalesce((SELECT notification_id FROM {schema}.opledger_tracking
                                  WHERE projection = %s AND upstream = %s), 0)
  AND topic = ANY(%s)
