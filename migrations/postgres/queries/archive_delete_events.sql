-- Archives.archive_remove: an archived operation's records, up to the version archived only.
DELETE FROM {table} WHERE originator_id = %s AND originator_version <= %s
