-- SQLiteStatusView.begin_rebuild: the migrated DDL of a table and its indexes (SQLite has no CREATE TABLE ... LIKE).
SELECT type, sql FROM sqlite_master WHERE tbl_name = ? AND sql IS NOT NULL
