-- Archives.archive_remove: an archived operation's records, up to the version archived only.
DELETE FROM {table} WHERE originator_id = ? AND originator_version <= ?
