-- Archives.archive_record: the segment, once (a rerun that finds it recorded adds nothing).
INSERT INTO {schema}.opledger_archive_segments (segment, digest, aggregates, records, summary, archived_at)
VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (segment) DO NOTHING
