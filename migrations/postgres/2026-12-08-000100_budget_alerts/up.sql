-- Budget alerts sent: one row per budget counter (named as its counter: a key id,
-- team:<id>, member:<team>:<user>, user:<id>), period (YYYY-MM-DD of its first day, or total)
-- and threshold (percent). The primary key makes each alert once, whichever node sees the
-- spend first. Money in micro-USD.
CREATE TABLE budget_alerts (
    counter TEXT NOT NULL,
    period TEXT NOT NULL,
    threshold INTEGER NOT NULL,
    scope TEXT NOT NULL,
    team_id TEXT,
    spent_micros BIGINT NOT NULL,
    limit_micros BIGINT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    PRIMARY KEY (counter, period, threshold)
);
-- A team's webhook: where its budget alerts are POSTed, and the signing secret, sealed with
-- the server's key.
CREATE TABLE team_webhooks (
    team_id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    secret_sealed TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
-- Webhook deliveries: each event to a team's webhook, tried until the receiver answers 2xx
-- (delivered) or every attempt failed (failed); a node claims a due one until locked_until.
CREATE TABLE webhook_deliveries (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL,
    event TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMP NOT NULL,
    locked_until TIMESTAMP,
    last_status INTEGER,
    last_error TEXT,
    created_at TIMESTAMP NOT NULL,
    delivered_at TIMESTAMP
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (status, next_attempt_at);
CREATE INDEX webhook_deliveries_team_idx ON webhook_deliveries (team_id, id);
