-- DatabaseDriver.identity_record: an identity row, unless the key is there already.
INSERT INTO {table} VALUES (%s, %s) ON CONFLICT (key) DO NOTHING
