-- depends: 0006.archives
-- Expired receipts moved into archive segments, as on SQLite
-- (sqlite/schema/0007.archived-receipts.sql says what each column holds); ids are uuid and
-- times timestamptz here.
CREATE TABLE IF NOT EXISTS opledger_archived_receipts (
    receipt_id UUID NOT NULL,
    segment INTEGER NOT NULL REFERENCES opledger_archive_segments (segment),
    version INTEGER NOT NULL,
    removed INTEGER NOT NULL DEFAULT 0,
    archived_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (receipt_id, segment)
);
CREATE INDEX IF NOT EXISTS opledger_archived_receipts_unremoved
    ON opledger_archived_receipts (removed, receipt_id);
UPDATE opledger_store SET value = '7' WHERE key = 'schema_version';
