-- select_records: a stretch of the notification log after a position, only the given topics
-- (and, when the prefix is not NULL, every topic starting with it), as plain rows. The
-- library's select_notifications query, minus building a Notification per row (ids are in
-- commit order: every insert holds the table's EXCLUSIVE lock).
SELECT notification_id, originator_id, originator_version, topic, state FROM {table}
WHERE notification_id > %s AND (topic = ANY(%s) OR starts_with(topic, %s))
ORDER BY notification_id LIMIT %s
