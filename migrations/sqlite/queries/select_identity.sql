-- DatabaseDriver.identity_record: the store's identity rows.
SELECT key, value FROM {table}
