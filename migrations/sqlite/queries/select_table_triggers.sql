-- StatusView.finish_rebuild: the main table's own triggers, recreated on the table swapped in.
SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = :table ORDER BY name
