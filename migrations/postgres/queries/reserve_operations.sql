-- StatusView.reserve: the ids no other worker holds, each locked until release_operations.
-- Advisory locks in opledger's own class (the first key), so other users of advisory locks in
-- the same database are not affected; two ids sharing a hash only make a worker skip one.
-- Session-level, not transaction-level: no BEGIN round trip before the claim (pickup latency).
SELECT id FROM unnest(%b::uuid[]) AS id
WHERE pg_try_advisory_lock(hashtext('opledger.reserve'), hashtext(id::text))
