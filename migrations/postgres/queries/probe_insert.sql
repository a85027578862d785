-- probe_refused: one insert through the function every append goes through (its lock, its
-- NOTIFY, the table's triggers and policies), in a transaction that is rolled back.
SELECT id FROM {function}(ARRAY[%s]::uuid[], ARRAY[1]::bigint[], ARRAY[%s]::text[], ARRAY[%s]::bytea[]) AS id
