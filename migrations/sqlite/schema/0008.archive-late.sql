-- depends: 0007.archived-receipts
-- What arrived for an archived operation after its records left the store (a provider's late
-- callback): kept here and on the attention queue as `late_after_archive` until an operator
-- acknowledges it (docs/adr/0010-archives.md §4). Never appended to the operation, whose history
-- would then start past version 1. One row per (operation, callback id): a provider's retry of
-- the same message is a duplicate.
CREATE TABLE IF NOT EXISTS opledger_archive_late (
    operation_id TEXT NOT NULL,
    callback_id TEXT NOT NULL,
    segment INTEGER NOT NULL,
    integration TEXT NOT NULL,
    outcome TEXT NOT NULL,
    remote_status TEXT,
    detail TEXT NOT NULL,
    received_at TEXT NOT NULL,
    acknowledged_at TEXT,
    acknowledged_by TEXT,
    evidence TEXT,
    PRIMARY KEY (operation_id, callback_id)
);
UPDATE opledger_store SET value = '8' WHERE key = 'schema_version';
