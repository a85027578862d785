-- depends: 0008.archive-late
-- Operations by status and label set, kept by triggers on the status table in the transaction
-- that changes it (docs/adr/0011-status-counts.md): StatusView.counts and the
-- `opledger_operations` gauge read this small table instead of grouping every status row on each
-- /metrics scrape, /health probe and summary line. Rows whose count reaches zero stay, at zero.
CREATE TABLE IF NOT EXISTS opledger_status_counts (
    status TEXT NOT NULL,
    -- the labels of the `opledger_operations` gauge, as in opledger_archive_totals (0006), which
    -- the reads add in: live and archived operations are counted by the same key
    integration TEXT NOT NULL,
    tenant TEXT NOT NULL,
    delivery_mode TEXT NOT NULL,
    operations INTEGER NOT NULL,
    -- named: a conflict on it is reported by this name
    CONSTRAINT opledger_status_counts_key PRIMARY KEY (status, integration, tenant, delivery_mode)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS opledger_count_inserted AFTER INSERT ON opledger_operation_status
BEGIN
    INSERT INTO opledger_status_counts (status, integration, tenant, delivery_mode, operations)
    VALUES (NEW.status, NEW.integration, NEW.tenant, NEW.delivery_mode, 1)
    ON CONFLICT (status, integration, tenant, delivery_mode) DO UPDATE SET operations = operations + 1;
END;
-- Only an update that moves the row to another status or label set counts.
CREATE TRIGGER IF NOT EXISTS opledger_count_updated
AFTER UPDATE OF status, integration, tenant, delivery_mode ON opledger_operation_status
WHEN OLD.status IS NOT NEW.status OR OLD.integration IS NOT NEW.integration
    OR OLD.tenant IS NOT NEW.tenant OR OLD.delivery_mode IS NOT NEW.delivery_mode
BEGIN
    UPDATE opledger_status_counts SET operations = operations - 1
    WHERE status = OLD.status AND integration = OLD.integration AND tenant = OLD.tenant
        AND delivery_mode = OLD.delivery_mode;
    INSERT INTO opledger_status_counts (status, integration, tenant, delivery_mode, operations)
    VALUES (NEW.status, NEW.integration, NEW.tenant, NEW.delivery_mode, 1)
    ON CONFLICT (status, integration, tenant, delivery_mode) DO UPDATE SET operations = operations + 1;
END;
CREATE TRIGGER IF NOT EXISTS opledger_count_deleted AFTER DELETE ON opledger_operation_status
BEGIN
    UPDATE opledger_status_counts SET operations = operations - 1
    WHERE status = OLD.status AND integration = OLD.integration AND tenant = OLD.tenant
        AND delivery_mode = OLD.delivery_mode;
END;
DELETE FROM opledger_status_counts;
INSERT INTO opledger_status_counts (status, integration, tenant, delivery_mode, operations)
SELECT status, integration, tenant, delivery_mode, COUNT(*) FROM opledger_operation_status
GROUP BY status, integration, tenant, delivery_mode;
UPDATE opledger_store SET value = '9' WHERE key = 'schema_version';
