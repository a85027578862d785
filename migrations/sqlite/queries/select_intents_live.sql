-- select_intents_live: the stored Intended records (the topics given; {topics} is a list of ?)
-- of the operations a worker may still act on, to read the declaration digest each was recorded
-- under: those whose status row has work due (through the due index; the log stores ids as hex,
-- the status table with hyphens) and those after the status projection's position (not
-- projected yet). Bounded by the live work and the projection's lag, not by history: reading
-- every intent took 2.6 s at 200,000 operations. Run at start, never per cycle.
SELECT e.originator_id, e.originator_version, e.topic, e.state
FROM opledger_operation_status s
JOIN {table} e ON e.originator_id = replace(s.operation_id, '-', '')
WHERE s.next_due_at IS NOT NULL AND e.topic IN ({topics})
UNION
SELECT originator_id, originator_version, topic, state FROM {table}
WHERE rowid > coalesce((SELECT notification_id FROM opledger_tracking WHERE projection = ? AND upstream = ?), 0)
  AND topic IN ({topics})
