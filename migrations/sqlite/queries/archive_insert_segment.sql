-- Archives.archive_record: the segment, once (a rerun that finds it recorded adds nothing).
INSERT INTO opledger_archive_segments (segment, digest, aggregates, records, summary, archived_at)
VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (segment) DO NOTHING
