-- Archives.archive_remove: a batch of archived operations' records (up to the version archived)
-- and status rows, in one statement, skipping any operation with a record past the version
-- archived (a late record: it stays whole, docs/adr/0010-archives.md §4). One statement because
-- it holds the records table against the insert function's EXCLUSIVE lock until the transaction
-- ends: every worker's append waits for it, so it must be short (the bench's e2e beside an
-- archive run measured the cost of a statement per operation). The late check and the deletes
-- share one snapshot, taken after that lock is granted, so no append can slip between them.
-- The status rows go in one statement too: the counters' trigger then adds the batch's keys in
-- sorted order, as the projection's writes do, so the two cannot deadlock on counter rows.
WITH archived AS (
  SELECT a.operation_id, a.version
  FROM unnest(%s::uuid[], %s::int[]) AS a (operation_id, version)
  WHERE NOT EXISTS (SELECT 1 FROM {table} e
                    WHERE e.originator_id = a.operation_id AND e.originator_version > a.version)
), records AS (
  DELETE FROM {table} AS e USING archived
  WHERE e.originator_id = archived.operation_id AND e.originator_version <= archived.version
)
DELETE FROM {schema}.opledger_operation_status AS s
USING archived
WHERE s.operation_id = archived.operation_id AND s.version <= archived.version
RETURNING s.status, s.integration, s.tenant, s.delivery_mode
