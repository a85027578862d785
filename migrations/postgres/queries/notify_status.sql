-- PostgresStatusView: wake the workers at commit (a write left work due now); the channel is the parameter.
SELECT pg_notify(%s, '')
