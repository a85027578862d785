-- The demo's fresh start: drop its own schema and everything in it (the schema, a quoted identifier).
DROP SCHEMA IF EXISTS {schema} CASCADE
