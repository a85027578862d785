-- Archives.archive_receipts_remove: a batch of archived receipt generations in one statement, for
-- the reason archive_remove_operations.sql gives (a removal holds the records table against the
-- insert function's EXCLUSIVE lock until it commits, so it must be short; before, three statements
-- per receipt). A generation with a record past the version archived (reopened since) keeps its
-- records and is marked 2; the others lose theirs up to that version and are marked 1
-- (docs/adr/0010-archives.md §4, §6). The check and the deletes share one snapshot.
WITH batch AS (
  SELECT b.receipt_id, b.segment, b.version,
         EXISTS (SELECT 1 FROM {table} e
                 WHERE e.originator_id = b.receipt_id AND e.originator_version > b.version) AS kept
  FROM unnest(%s::uuid[], %s::int[], %s::int[]) AS b (receipt_id, segment, version)
), records AS (
  DELETE FROM {table} AS e USING batch
  WHERE NOT batch.kept AND e.originator_id = batch.receipt_id AND e.originator_version <= batch.version
)
UPDATE {schema}.opledger_archived_receipts AS r
SET removed = CASE WHEN batch.kept THEN 2 ELSE 1 END
FROM batch
WHERE r.receipt_id = batch.receipt_id AND r.segment = batch.segment
