-- StatusView.write's staging table: private to the session, emptied at each commit.
CREATE TEMP TABLE IF NOT EXISTS opledger_status_stage
    (LIKE opledger_operation_status INCLUDING DEFAULTS) ON COMMIT DELETE ROWS
