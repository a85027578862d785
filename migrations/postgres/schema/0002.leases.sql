-- depends: 0001.store-and-status
-- Leadership leases: one projection writer per store at a time. Expiry uses the database's own
-- clock, so hosts with skewed clocks agree on who leads; every projection write re-checks the
-- lease in its own transaction, so a stalled former leader can never write (fencing).
CREATE TABLE IF NOT EXISTS opledger_leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
UPDATE opledger_store SET value = '2' WHERE key = 'schema_version';
