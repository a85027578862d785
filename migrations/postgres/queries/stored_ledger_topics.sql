-- stored_ledger_topics: the distinct stored topics starting with a prefix or among the given
-- ones, with their record counts. Reads the whole events table (no index on topic): run at
-- start, never per cycle.
SELECT topic, COUNT(*) FROM {table}
WHERE starts_with(topic, %s) OR topic = ANY(%s)
GROUP BY topic
