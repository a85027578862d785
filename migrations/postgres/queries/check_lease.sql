-- PostgresStatusView.write: inside the write's transaction, hold the lease row so a takeover
-- waits for this commit, and confirm we still lead.
SELECT 1 FROM opledger_leases
WHERE name = %(name)s AND holder = %(holder)s AND expires_at > now()
FOR SHARE
