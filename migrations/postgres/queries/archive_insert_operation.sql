-- Archives.archive_record: one archived operation's index row; an id is archived once.
INSERT INTO {schema}.opledger_archived_operations (operation_id, segment, version, status, archived_at)
VALUES (%s, %s, %s, %s, %s) ON CONFLICT (operation_id) DO NOTHING
