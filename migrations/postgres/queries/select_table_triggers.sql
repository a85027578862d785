-- StatusView.finish_rebuild: the main table's own triggers, recreated on the table swapped in.
SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = %(table)s::regclass AND NOT tgisinternal ORDER BY tgname
