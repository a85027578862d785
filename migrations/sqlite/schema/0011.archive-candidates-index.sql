-- depends: 0010.read-order-indexes
-- `opledger archive` pages through the closed status rows oldest first (archive_candidates.sql:
-- keyset on (updated_at, operation_id), the same closed predicate). Without an index each page
-- read and sorted every status row, so a run cost the square of the store's size: 29 minutes for
-- 1,000,000 operations on PostgreSQL, with the scans' CPU taken from the live workers beside it
-- (docs/performance.md, "A big store"). The index holds only closed rows, in the run's order, so
-- a page reads a page of entries; a row enters it once, when its operation closes.
CREATE INDEX IF NOT EXISTS opledger_operation_status_closed
    ON opledger_operation_status (updated_at, operation_id)
    WHERE attention IS NULL AND settlement <> 'pending'
      AND (settlement IN ('settled', 'not_required') OR disposition = 'abandoned');
UPDATE opledger_store SET value = '11' WHERE key = 'schema_version';
