-- import-json: write the WAL's frames into the store file and empty the WAL; answers (busy, frames in the WAL, frames written).
PRAGMA wal_checkpoint(TRUNCATE)
