-- StatusView.begin_rebuild: drop a leftover rebuild table.
DROP TABLE IF EXISTS {rebuild}
