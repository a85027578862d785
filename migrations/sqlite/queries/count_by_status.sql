-- StatusView.counts: from the counters the status table's triggers keep (schema 0009).
SELECT status, SUM(operations) FROM opledger_status_counts GROUP BY status HAVING SUM(operations) <> 0
