-- Archives.archive_segments: every recorded segment, its digest and carried-forward summary.
SELECT segment, digest, summary FROM {schema}.opledger_archive_segments ORDER BY segment
