-- depends: 0006.archives
-- Expired idempotency receipts moved into archive segments (docs/adr/0010-archives.md §6,
-- docs/adr/0006-idempotency-receipts.md): one row per receipt generation archived, with its
-- segment and the version archived. `removed`: 0 while its records are still to be deleted, 1
-- once they are, 2 when a record past the version archived arrived first (it was reopened) and
-- the receipt was kept whole. A receipt's id comes back when its key is used again after
-- removal (a new generation from version 1), so the key is (receipt_id, segment).
CREATE TABLE IF NOT EXISTS opledger_archived_receipts (
    receipt_id TEXT NOT NULL,
    segment INTEGER NOT NULL REFERENCES opledger_archive_segments (segment),
    version INTEGER NOT NULL,
    removed INTEGER NOT NULL DEFAULT 0,
    archived_at TEXT NOT NULL,
    PRIMARY KEY (receipt_id, segment)
);
CREATE INDEX IF NOT EXISTS opledger_archived_receipts_unremoved
    ON opledger_archived_receipts (removed, receipt_id);
UPDATE opledger_store SET value = '7' WHERE key = 'schema_version';
