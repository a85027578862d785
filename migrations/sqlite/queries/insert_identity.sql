-- DatabaseDriver.identity_record: an identity row, unless the key is there already.
INSERT OR IGNORE INTO {table} VALUES (?, ?)
