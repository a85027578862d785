-- MetricsStore.replace: a rebuild's totals replace every row, with the position, in one transaction.
DELETE FROM opledger_metrics
