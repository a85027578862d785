-- SQLiteStatusView.begin_rebuild: the migrated DDL of a table and its indexes (SQLite has no
-- CREATE TABLE ... LIKE). Not its triggers: they move to the rebuilt table at the swap.
SELECT type, sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('table', 'index') AND sql IS NOT NULL
