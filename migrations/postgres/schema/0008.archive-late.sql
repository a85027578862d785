-- depends: 0007.archived-receipts
-- Late records of archived operations, as on SQLite (sqlite/schema/0008.archive-late.sql says
-- what each column holds); ids are uuid and times timestamptz here.
CREATE TABLE IF NOT EXISTS opledger_archive_late (
    operation_id UUID NOT NULL,
    callback_id TEXT NOT NULL,
    segment INTEGER NOT NULL,
    integration TEXT NOT NULL,
    outcome TEXT NOT NULL,
    remote_status TEXT,
    detail TEXT NOT NULL,
    received_at TIMESTAMPTZ NOT NULL,
    acknowledged_at TIMESTAMPTZ,
    acknowledged_by TEXT,
    evidence TEXT,
    PRIMARY KEY (operation_id, callback_id)
);
UPDATE opledger_store SET value = '8' WHERE key = 'schema_version';
