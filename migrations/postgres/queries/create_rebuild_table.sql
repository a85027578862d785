-- StatusView.begin_rebuild: an empty rebuild table shaped like the main one.
CREATE TABLE {rebuild} (LIKE {main} INCLUDING ALL)
