-- depends: 0002.leases
-- The events insert function (ledger.persistence.LedgerPostgresApplicationRecorder) is created
-- by the recorder's table creation, which `opledger migrate` runs before these migrations; this
-- version makes a store migrated by older code refuse to open until it is migrated again.
UPDATE opledger_store SET value = '3' WHERE key = 'schema_version';
