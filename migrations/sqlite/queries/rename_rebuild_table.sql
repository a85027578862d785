-- StatusView.finish_rebuild: the rebuild table becomes the main one.
ALTER TABLE {rebuild} RENAME TO {main}
