-- SQLiteStatusView: the read model's connection skips the fsync per commit (rows are rebuilt from the log).
PRAGMA synchronous=NORMAL
