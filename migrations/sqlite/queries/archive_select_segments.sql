-- Archives.archive_segments: every recorded segment, its digest, carried-forward summary and records moved out.
SELECT segment, digest, summary, records FROM opledger_archive_segments ORDER BY segment
