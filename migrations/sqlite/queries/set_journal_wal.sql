-- DatabaseDriver.store_prepare: put the store file in WAL mode (answers the mode now in force).
PRAGMA journal_mode=WAL
