-- LedgerPostgresApplicationRecorder: one server-side call per batch: the table's EXCLUSIVE lock,
-- the event log's NOTIFY (its payload says whether an intent was appended), the insert, the ids
-- in insertion order. Created by opledger migrate with the events table.
CREATE OR REPLACE FUNCTION {function}(ids {id_type}[], versions bigint[], topics text[], states bytea[])
RETURNS SETOF bigint LANGUAGE plpgsql AS $BODY$ BEGIN
SET LOCAL lock_timeout = '{lock_timeout}s';
LOCK TABLE {table} IN EXCLUSIVE MODE;
PERFORM pg_notify({channel}, CASE WHEN topics && {intents} THEN {intent_payload} ELSE {appended_payload} END);
RETURN QUERY INSERT INTO {table} (originator_id, originator_version, topic, state)
SELECT * FROM unnest(ids, versions, topics, states) RETURNING notification_id;
END; $BODY$
