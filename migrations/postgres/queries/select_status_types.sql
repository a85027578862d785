-- The status table's columns and type OIDs in table order (binary COPY needs the types).
SELECT attname, atttypid FROM pg_attribute
WHERE attrelid = 'opledger_operation_status'::regclass AND attnum > 0 AND NOT attisdropped
ORDER BY attnum
