-- depends: 0005.metrics
-- Archives (docs/adr/0010-archives.md): every segment `opledger archive` wrote and recorded,
-- with its manifest digest (which anchors the hash chain's head) and the carried-forward
-- summary of what the status totals had counted of its operations (JSON: totals by status);
-- and an index row per archived operation: its segment, the version archived (later versions
-- are never deleted), its final status. An id here is never selected again and never intended
-- again.
CREATE TABLE IF NOT EXISTS opledger_archive_segments (
    segment INTEGER PRIMARY KEY,
    digest TEXT NOT NULL,
    aggregates INTEGER NOT NULL,
    records INTEGER NOT NULL,
    summary TEXT NOT NULL,
    archived_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS opledger_archived_operations (
    operation_id TEXT PRIMARY KEY,
    segment INTEGER NOT NULL REFERENCES opledger_archive_segments (segment),
    version INTEGER NOT NULL,
    status TEXT NOT NULL,
    archived_at TEXT NOT NULL
);
-- The carried-forward totals: archived operations by final status and label set, added in the
-- transaction that records their segment; the status totals and the `opledger_operations` gauge
-- add them in, so neither goes backwards when operations leave the hot store.
CREATE TABLE IF NOT EXISTS opledger_archive_totals (
    status TEXT NOT NULL,
    integration TEXT NOT NULL,
    tenant TEXT NOT NULL,
    delivery_mode TEXT NOT NULL,
    operations INTEGER NOT NULL,
    PRIMARY KEY (status, integration, tenant, delivery_mode)
);
UPDATE opledger_store SET value = '6' WHERE key = 'schema_version';
