-- select_open_intents: select_records for intents only (the Intended topics), leaving out those
-- whose operation recorded something after them already (claimed by a worker, cancelled...):
-- the log's tail offers workers the intents still waiting. The next event is looked up by the
-- primary key (originator_id, originator_version), one probe per intent read.
SELECT r.notification_id, r.originator_id, r.originator_version, r.topic, r.state FROM {table} AS r
WHERE r.notification_id > %s AND r.topic = ANY(%s)
AND NOT EXISTS (SELECT 1 FROM {table} AS n
                WHERE n.originator_id = r.originator_id AND n.originator_version = r.originator_version + 1)
ORDER BY r.notification_id LIMIT %s
