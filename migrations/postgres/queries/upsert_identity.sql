-- DatabaseDriver.identity_record: an identity row, replacing the key's value.
INSERT INTO {table} VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
