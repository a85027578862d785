-- opledger read models, PostgreSQL. Applied only by `opledger migrate` (yoyo-migrations),
-- never by racing workers (DESIGN §8).
CREATE TABLE IF NOT EXISTS opledger_store (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO opledger_store (key, value) VALUES ('schema_version', '1')
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;

CREATE TABLE IF NOT EXISTS opledger_tracking (
    projection TEXT NOT NULL,
    upstream TEXT NOT NULL,
    notification_id BIGINT NOT NULL,
    PRIMARY KEY (projection, upstream)
);

CREATE TABLE IF NOT EXISTS opledger_operation_status (
    operation_id UUID PRIMARY KEY,
    version INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    integration TEXT NOT NULL,
    integration_version INTEGER NOT NULL,
    delivery_mode TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending','claimed','dispatching','accepted','succeeded',
        'failed','ambiguous','cancelled','settled','settlement_blocked')),
    execution TEXT NOT NULL,
    settlement TEXT NOT NULL,
    approval TEXT NOT NULL,
    attempts INTEGER NOT NULL CHECK (attempts >= 0),
    max_attempts INTEGER NOT NULL CHECK (attempts <= max_attempts),
    epoch INTEGER NOT NULL,
    worker_id TEXT,
    lease_expires_at TIMESTAMPTZ,
    next_due_at TIMESTAMPTZ,
    remote_id TEXT,
    attention TEXT,
    disposition TEXT,
    failure_category TEXT,
    ambiguity_reason TEXT,
    cancel_requested BOOLEAN NOT NULL,
    source_entity_type TEXT NOT NULL,
    source_entity_id UUID NOT NULL,
    source_entity_version INTEGER NOT NULL,
    effect_index INTEGER NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS opledger_operation_status_due
    ON opledger_operation_status (next_due_at) WHERE next_due_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS opledger_operation_status_status ON opledger_operation_status (status);
CREATE INDEX IF NOT EXISTS opledger_operation_status_attention
    ON opledger_operation_status (attention) WHERE attention IS NOT NULL;
