-- depends: 0002.leases
-- Kept parallel with PostgreSQL, whose events insert function came with this version.
UPDATE opledger_store SET value = '3' WHERE key = 'schema_version';
