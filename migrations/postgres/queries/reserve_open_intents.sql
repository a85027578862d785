-- reserve_open_intents: select_open_intents that also reserves each intent it returns, as
-- reserve_operations does (the same advisory locks, released by release_operations on the same
-- connection): a worker picking up new intents reads and reserves them in one round trip, and a
-- worker that lost the race to another reads them as held elsewhere and does nothing more.
-- The intents are chosen first (MATERIALIZED: the lock is tried once per row returned, never
-- on a row the LIMIT would drop afterwards); the first column is the log's last position, as
-- in select_open_intents.
WITH t AS (SELECT max(notification_id) AS last FROM {table}),
o AS MATERIALIZED (
    SELECT r.notification_id, r.originator_id, r.originator_version, r.topic, r.state FROM {table} AS r
    WHERE r.notification_id > %s AND r.topic = ANY(%s)
    AND NOT EXISTS (SELECT 1 FROM {table} AS n
                    WHERE n.originator_id = r.originator_id AND n.originator_version = r.originator_version + 1)
    ORDER BY r.notification_id LIMIT %s
)
SELECT t.last, o.notification_id, o.originator_id, o.originator_version, o.topic, o.state,
       CASE WHEN o.originator_id IS NULL THEN NULL
            ELSE pg_try_advisory_lock(hashtext('opledger.reserve'), hashtext(o.originator_id::text)) END AS held
FROM t LEFT JOIN o ON true
ORDER BY o.notification_id
