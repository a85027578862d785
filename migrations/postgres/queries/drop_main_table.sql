-- StatusView.finish_rebuild: drop the main table (the rebuild table takes its name next).
DROP TABLE {main}
