-- Reservations.current: reserve each operation that recorded nothing after the given version
-- (the due-work pass judged it by that version) and that no other worker holds, with the lock
-- reserve_operations takes. The CASE tries the lock only for an operation that has not moved on
-- (a CASE evaluates its branches in order), so no lock is taken on a row left out.
SELECT r.id FROM unnest(%b::uuid[], %b::bigint[]) AS r(id, version)
WHERE CASE WHEN EXISTS (SELECT 1 FROM {table} AS n WHERE n.originator_id = r.id AND n.originator_version = r.version + 1)
           THEN false
           ELSE pg_try_advisory_lock(hashtext('opledger.reserve'), hashtext(r.id::text)) END
