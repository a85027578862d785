-- LedgerSQLiteFactory: every connection of the event log commits durably (fsync per commit).
PRAGMA synchronous=FULL
