-- select_records: a stretch of the notification log after a position, only the given topics
-- (and, when the prefix is not NULL, every topic starting with it: GLOB, as LIKE ignores case),
-- as plain rows ({topics} is a list of ?). The library's select_notifications query, minus
-- building a Notification per row.
SELECT rowid, originator_id, originator_version, topic, state FROM {table}
WHERE rowid > ? AND (topic IN ({topics}) OR topic GLOB ? || '*')
ORDER BY rowid LIMIT ?
