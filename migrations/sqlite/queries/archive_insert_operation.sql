-- Archives.archive_record: one archived operation's index row; an id is archived once.
INSERT INTO opledger_archived_operations (operation_id, segment, version, status, archived_at)
VALUES (?, ?, ?, ?, ?) ON CONFLICT (operation_id) DO NOTHING
