-- Archives.archive_remove: the status rows of a batch's removed operations, each only if it is
-- the version archived. One statement: the counters' trigger then adds the batch's keys in
-- sorted order, as the projection's writes do, so the two cannot deadlock on counter rows.
DELETE FROM {schema}.opledger_operation_status AS s
USING unnest(%s::uuid[], %s::int[]) AS archived (operation_id, version)
WHERE s.operation_id = archived.operation_id AND s.version <= archived.version
RETURNING s.status, s.integration, s.tenant, s.delivery_mode
