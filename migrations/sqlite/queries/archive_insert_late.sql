-- Archives.archive_late_record: a record for an archived operation, once per callback id.
INSERT INTO opledger_archive_late (operation_id, callback_id, segment, integration, outcome, remote_status, detail,
                                   received_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (operation_id, callback_id) DO NOTHING
