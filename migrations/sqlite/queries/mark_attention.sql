-- StatusView.write(marks=...): an operation whose stored events cannot be folded stops being due
-- and goes on the attention queue (unreadable_event or corrupt_record, with the record's detail);
-- its row keeps the last state that decoded.
UPDATE opledger_operation_status SET attention = :attention, attention_detail = :detail, next_due_at = NULL
WHERE operation_id = :operation_id
