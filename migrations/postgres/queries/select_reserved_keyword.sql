-- DatabaseDriver.store_prepare: whether a schema name is a keyword PostgreSQL reserves (and of which kind).
SELECT catdesc FROM pg_get_keywords() WHERE word = %s AND catcode <> 'U'
