-- depends: 0004.attention-detail
-- The metrics read model (projections/metrics.py): counters and histogram parts folded from the
-- event log, one row per metric and label set, written with the projection's tracking position
-- in one transaction. `detail` is the metric's own label (a reason, an outcome, a bucket's
-- upper bound), '' when it has none. Tenants are stored as they are and folded into 'other'
-- beyond the configured top N when scraped, so a rebuild gives the same numbers.
CREATE TABLE IF NOT EXISTS opledger_metrics (
    name TEXT NOT NULL,
    integration TEXT NOT NULL,
    tenant TEXT NOT NULL,
    delivery_mode TEXT NOT NULL,
    detail TEXT NOT NULL,
    value DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (name, integration, tenant, delivery_mode, detail)
);
UPDATE opledger_store SET value = '5' WHERE key = 'schema_version';
