-- MetricsStore.write: move the position from where the batch started to where it ends; no row
-- changes when another writer moved it meanwhile (the batch is then discarded, never counted twice).
INSERT INTO opledger_tracking (projection, upstream, notification_id)
VALUES (:projection, :upstream, :notification_id)
ON CONFLICT (projection, upstream) DO UPDATE SET notification_id = EXCLUDED.notification_id
WHERE opledger_tracking.notification_id = :expected
