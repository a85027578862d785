-- load_aggregates: every stored event of many aggregates in one query.
SELECT originator_id, originator_version, topic, state FROM {table}
WHERE originator_id = ANY(%b)
ORDER BY originator_id, originator_version
