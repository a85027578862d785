-- depends: 0008.archive-late
-- Operations by status and label set, kept by statement-level triggers on the status table in
-- the transaction that changes it (docs/adr/0011-status-counts.md): StatusView.counts and the
-- `opledger_operations` gauge read this small table instead of grouping every status row on each
-- /metrics scrape, /health probe and summary line. Rows whose count reaches zero stay, at zero.
CREATE TABLE IF NOT EXISTS opledger_status_counts (
    status TEXT NOT NULL,
    -- the labels of the `opledger_operations` gauge, as in opledger_archive_totals (0006), which
    -- the reads add in: live and archived operations are counted by the same key
    integration TEXT NOT NULL,
    tenant TEXT NOT NULL,
    delivery_mode TEXT NOT NULL,
    operations BIGINT NOT NULL,
    -- named: a conflict on it is reported by this name
    CONSTRAINT opledger_status_counts_key PRIMARY KEY (status, integration, tenant, delivery_mode)
);
-- One function for the three triggers: a branch reads only the transition tables its event has.
-- Keys are added in their sorted order, so two writers lock counter rows in the same order.
-- `search_path FROM CURRENT`: the schema migrated, whatever the writing session's path.
CREATE OR REPLACE FUNCTION opledger_count_status() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO opledger_status_counts AS c (status, integration, tenant, delivery_mode, operations)
        SELECT status, integration, tenant, delivery_mode, COUNT(*) FROM new_rows
        GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
        ON CONFLICT (status, integration, tenant, delivery_mode)
        DO UPDATE SET operations = c.operations + excluded.operations;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO opledger_status_counts AS c (status, integration, tenant, delivery_mode, operations)
        SELECT status, integration, tenant, delivery_mode, -COUNT(*) FROM old_rows
        GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
        ON CONFLICT (status, integration, tenant, delivery_mode)
        DO UPDATE SET operations = c.operations + excluded.operations;
    ELSE
        INSERT INTO opledger_status_counts AS c (status, integration, tenant, delivery_mode, operations)
        SELECT status, integration, tenant, delivery_mode, SUM(n) FROM (
            SELECT status, integration, tenant, delivery_mode, 1 AS n FROM new_rows
            UNION ALL
            SELECT status, integration, tenant, delivery_mode, -1 AS n FROM old_rows
        ) AS changed
        GROUP BY 1, 2, 3, 4 HAVING SUM(n) <> 0 ORDER BY 1, 2, 3, 4
        ON CONFLICT (status, integration, tenant, delivery_mode)
        DO UPDATE SET operations = c.operations + excluded.operations;
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS opledger_count_inserted ON opledger_operation_status;
CREATE TRIGGER opledger_count_inserted AFTER INSERT ON opledger_operation_status
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION opledger_count_status();
DROP TRIGGER IF EXISTS opledger_count_updated ON opledger_operation_status;
CREATE TRIGGER opledger_count_updated AFTER UPDATE ON opledger_operation_status
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION opledger_count_status();
DROP TRIGGER IF EXISTS opledger_count_deleted ON opledger_operation_status;
CREATE TRIGGER opledger_count_deleted AFTER DELETE ON opledger_operation_status
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION opledger_count_status();
DELETE FROM opledger_status_counts;
INSERT INTO opledger_status_counts (status, integration, tenant, delivery_mode, operations)
SELECT status, integration, tenant, delivery_mode, COUNT(*) FROM opledger_operation_status GROUP BY 1, 2, 3, 4;
UPDATE opledger_store SET value = '9' WHERE key = 'schema_version';
