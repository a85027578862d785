-- depends: 0001.store-and-status
-- Kept parallel with PostgreSQL; on SQLite one process owns the store, so it always leads.
CREATE TABLE IF NOT EXISTS opledger_leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
UPDATE opledger_store SET value = '2' WHERE key = 'schema_version';
