-- stored_ledger_topics: the distinct stored topics starting with a prefix (GLOB: case matters)
-- or among the given ones ({topics} is a list of ?), with their record counts. Reads the whole
-- events table (no index on topic): run at start, never per cycle.
SELECT topic, COUNT(*) FROM {table}
WHERE topic GLOB ? || '*' OR topic IN ({topics})
GROUP BY topic
