-- select_open_intents: select_records for intents only (the Intended topics), leaving out those
-- whose operation recorded something after them already (claimed by a worker, cancelled...):
-- the log's tail offers workers the intents still waiting. The next event is looked up by the
-- primary key (originator_id, originator_version), one probe per intent read.
-- The first column is the log's last position in this statement's snapshot (every insert holds
-- the table's EXCLUSIVE lock until its commit, so no smaller position is committed later): a
-- reader that found fewer intents than it asked for knows every other intent up to there was
-- closed, and starts its next read there instead of scanning the same stretch again. One row of
-- NULLs after it when no intent is open, so the position comes back either way.
-- With the last parameter true (projections.reservations) each intent returned is also reserved,
-- with the lock reserve_operations takes, and the last column says whether it was (false: another
-- worker holds it); the intents are chosen first (MATERIALIZED), so the lock is tried once per
-- row returned, never on a row the LIMIT would drop. With it false no lock is tried (NULL).
WITH t AS (SELECT max(notification_id) AS last FROM {table}),
o AS MATERIALIZED (
    SELECT r.notification_id, r.originator_id, r.originator_version, r.topic, r.state FROM {table} AS r
    WHERE r.notification_id > %s AND r.topic = ANY(%s)
    AND NOT EXISTS (SELECT 1 FROM {table} AS n
                    WHERE n.originator_id = r.originator_id AND n.originator_version = r.originator_version + 1)
    ORDER BY r.notification_id LIMIT %s
)
SELECT t.last, o.notification_id, o.originator_id, o.originator_version, o.topic, o.state,
       CASE WHEN o.originator_id IS NOT NULL AND %s::boolean
            THEN pg_try_advisory_lock(hashtext('opledger.reserve'), hashtext(o.originator_id::text)) END AS held
FROM t LEFT JOIN o ON true
ORDER BY o.notification_id
