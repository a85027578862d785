-- DatabaseDriver.store_prepare: the store's own schema (a quoted identifier).
CREATE SCHEMA IF NOT EXISTS {schema}
