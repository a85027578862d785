-- StatusView.reserve: release the locks reserve_operations took (once per id it returned).
SELECT count(*) FROM unnest(%b::uuid[]) AS id
WHERE pg_advisory_unlock(hashtext('opledger.reserve'), hashtext(id::text))
