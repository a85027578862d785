-- Archives.archive_unremoved: archived operations whose status row (and so records) are still
-- in the hot store: what a removal interrupted by a kill left. One with a record past the
-- version archived (a late record, docs/adr/0010-archives.md §4) stays whole and is not listed.
SELECT a.operation_id, a.version FROM opledger_archived_operations a
WHERE EXISTS (SELECT 1 FROM opledger_operation_status s WHERE s.operation_id = a.operation_id AND s.version <= a.version)
  AND NOT EXISTS (SELECT 1 FROM {table} e
                  WHERE e.originator_id = replace(a.operation_id, '-', '') AND e.originator_version > a.version)
ORDER BY a.operation_id
LIMIT ?
