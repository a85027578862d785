-- probe_refused: one insert into the events table (its triggers and constraints), in a
-- transaction that is rolled back.
INSERT INTO {table} (originator_id, originator_version, topic, state) VALUES (?, 1, ?, ?)
