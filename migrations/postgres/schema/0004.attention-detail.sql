-- depends: 0003.insert-function
-- The attention queue says what an operator needs to act on: for an event this code cannot read
-- (unreadable_event) or a malformed record (corrupt_record), its topic and position, as JSON.
-- Added last, so the status row's fields (projections/rows.py StatusRow) keep table order.
ALTER TABLE opledger_operation_status ADD COLUMN IF NOT EXISTS attention_detail TEXT;
UPDATE opledger_store SET value = '4' WHERE key = 'schema_version';
