-- SQLiteStatusView: a read-only connection's transaction.
BEGIN
