-- LedgerPostgresApplicationRecorder.insert_events: a small batch, one parameter per value (the arguments: four casts of insert_small_column).
SELECT id FROM {function}({arguments}) AS id
