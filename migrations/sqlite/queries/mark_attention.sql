-- StatusView.write(corrupt=...): an operation whose stored events cannot be decoded stops being due and
-- goes on the attention queue; its row keeps the last state that decoded.
UPDATE opledger_operation_status SET attention = 'corrupt_record', next_due_at = NULL
WHERE operation_id = :operation_id
