-- depends: 0009.status-counts
-- The operator reads in their own order, so a first page reads a page of index entries instead
-- of sorting every status row: `ops list`, the observe API's list and search (newest first,
-- ties by id) and the attention queue (oldest first). Without them a first page sorted the
-- whole table: `list` 59.8 ms p50 at 500,000 operations on PostgreSQL, 268 ms at 200,000 on
-- SQLite (docs/performance.md, "A big store"). The attention index holds only the rows on the
-- queue, so it costs nothing to a row that is not.
CREATE INDEX IF NOT EXISTS opledger_operation_status_newest
    ON opledger_operation_status (created_at DESC, operation_id);
CREATE INDEX IF NOT EXISTS opledger_operation_status_attention_oldest
    ON opledger_operation_status (updated_at, operation_id) WHERE attention IS NOT NULL;
UPDATE opledger_store SET value = '10' WHERE key = 'schema_version';
