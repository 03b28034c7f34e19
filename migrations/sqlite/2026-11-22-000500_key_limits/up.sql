-- Per-key models, budget, rate limits and metadata, and rotation with a grace period.
-- allowed_models and metadata are JSON text (an array of strings; an object of strings);
-- max_budget_micros is micro-USD; budget_period is daily / weekly / monthly / total (NULL: total).
ALTER TABLE api_keys ADD COLUMN allowed_models TEXT;
ALTER TABLE api_keys ADD COLUMN max_budget_micros BIGINT;
ALTER TABLE api_keys ADD COLUMN budget_period TEXT;
ALTER TABLE api_keys ADD COLUMN rpm_limit BIGINT;
ALTER TABLE api_keys ADD COLUMN tpm_limit BIGINT;
ALTER TABLE api_keys ADD COLUMN metadata TEXT;
-- Rotation: the secret replaced by the last rotation stays valid until previous_key_expires_at.
ALTER TABLE api_keys ADD COLUMN previous_key_hash TEXT;
ALTER TABLE api_keys ADD COLUMN previous_key_expires_at TIMESTAMP;
ALTER TABLE api_keys ADD COLUMN rotated_at TIMESTAMP;
CREATE UNIQUE INDEX api_keys_previous_key_hash_idx ON api_keys (previous_key_hash);

-- Budget counters: per key and budget period (its first UTC day, 'YYYY-MM-DD'; 'total' for a
-- budget that never resets), the micro-USD committed: settled spend plus the worst-case cost
-- of calls still running. A call reserves with one conditional UPDATE (docs/budgets.md).
CREATE TABLE key_budget_periods (
    api_key_id       TEXT NOT NULL,
    period           TEXT NOT NULL,
    committed_micros BIGINT NOT NULL,
    PRIMARY KEY (api_key_id, period)
);

-- Per-key request and token counters of one minute (window: Unix seconds of the minute's
-- start), for rpm_limit and tpm_limit across nodes (docs/budgets.md).
CREATE TABLE key_rate_windows (
    api_key_id TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    requests   BIGINT NOT NULL,
    tokens     BIGINT NOT NULL,
    PRIMARY KEY (api_key_id, window_start)
);
