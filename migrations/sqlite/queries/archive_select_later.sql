-- Archives.archive_remove: whether an archived operation has a record past the version archived
-- (a late record that arrived after its segment was written): then nothing of it is removed
-- (docs/adr/0010-archives.md §4).
SELECT 1 FROM {table} WHERE originator_id = ? AND originator_version > ? LIMIT 1
