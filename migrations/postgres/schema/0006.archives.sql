-- depends: 0005.metrics
-- The archive index, as on SQLite (sqlite/schema/0006.archives.sql says what each column holds);
-- ids are uuid and times timestamptz here, as in the status view.
CREATE TABLE IF NOT EXISTS opledger_archive_segments (
    segment INTEGER PRIMARY KEY,
    digest TEXT NOT NULL,
    aggregates INTEGER NOT NULL,
    records INTEGER NOT NULL,
    summary TEXT NOT NULL,
    archived_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS opledger_archived_operations (
    operation_id UUID PRIMARY KEY,
    segment INTEGER NOT NULL REFERENCES opledger_archive_segments (segment),
    version INTEGER NOT NULL,
    status TEXT NOT NULL,
    archived_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS opledger_archive_totals (
    status TEXT NOT NULL,
    integration TEXT NOT NULL,
    tenant TEXT NOT NULL,
    delivery_mode TEXT NOT NULL,
    operations INTEGER NOT NULL,
    PRIMARY KEY (status, integration, tenant, delivery_mode)
);
UPDATE opledger_store SET value = '6' WHERE key = 'schema_version';
