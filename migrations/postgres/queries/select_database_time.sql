-- PostgresStatusView.lease_clock: the database's time, read while the statement runs (not the
-- transaction's start, which now() would give), for the worker's first clock reading.
SELECT clock_timestamp()
