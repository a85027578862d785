-- StatusView.write: the position, in the same transaction as the rows.
INSERT INTO opledger_tracking (projection, upstream, notification_id)
VALUES (%(projection)s, %(upstream)s, %(notification_id)s)
ON CONFLICT (projection, upstream) DO UPDATE SET notification_id = EXCLUDED.notification_id
