-- SQLiteStatusView: a writer's transaction takes the write lock up front, so two writers never deadlock.
BEGIN IMMEDIATE
