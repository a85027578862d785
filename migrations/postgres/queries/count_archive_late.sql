-- MetricsStore.gauges: late records of archived operations that no operator acknowledged yet, by
-- integration (the attention queue's late_after_archive; docs/adr/0010-archives.md §4).
SELECT integration, count(*) FROM opledger_archive_late WHERE acknowledged_at IS NULL GROUP BY integration
