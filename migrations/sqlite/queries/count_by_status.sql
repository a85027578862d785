-- StatusView.counts
SELECT status, COUNT(*) FROM opledger_operation_status GROUP BY status
