-- DatabaseDriver.journal_mode: the store file's journal mode (opledger stores use WAL).
PRAGMA journal_mode
