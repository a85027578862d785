-- LedgerPostgresApplicationRecorder.insert_events: a large batch as four arrays, dumped in binary.
SELECT id FROM {function}(%b, %b, %b, %b) AS id
