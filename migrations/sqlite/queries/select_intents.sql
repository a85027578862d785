-- select_intents: every stored Intended record (the topics given; {topics} is a list of ?), to
-- read the declaration digest each operation was recorded under. Reads the whole events table
-- (no index on topic): run at start, never per cycle.
SELECT originator_id, originator_version, topic, state FROM {table}
WHERE topic IN ({topics})
