-- load_aggregates: every stored event of many aggregates in one query ({ids} is a list of ?).
SELECT originator_id, originator_version, topic, state FROM {table}
WHERE originator_id IN ({ids})
ORDER BY originator_id, originator_version
