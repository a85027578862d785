-- DatabaseDriver.identity_record: an identity row, replacing the key's value.
INSERT OR REPLACE INTO {table} VALUES (?, ?)
