-- StatusView.finish_rebuild: the swapped-in table is counted afresh (insert_status_counts).
DELETE FROM opledger_status_counts
