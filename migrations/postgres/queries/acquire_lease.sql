-- PostgresStatusView.lead: take or extend the named lease; returns a row only when we hold it.
INSERT INTO opledger_leases (name, holder, expires_at)
VALUES (%(name)s, %(holder)s, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE opledger_leases.holder = EXCLUDED.holder OR opledger_leases.expires_at < now()
RETURNING holder
