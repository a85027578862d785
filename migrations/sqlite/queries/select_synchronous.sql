-- LedgerSQLiteFactory: read back the synchronous setting (2 is FULL).
PRAGMA synchronous
