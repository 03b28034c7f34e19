-- The usage ledger. One row per metered chat completion, idempotent by request id,
-- and daily rollups per (API key, model, UTC day) kept up to date in the same transaction.
-- api_key_id and user_id are plain text without foreign keys: the ledger is history and
-- outlives the deletion of a key. Money is integer micro-USD.
CREATE TABLE usage_records (
    request_id        TEXT PRIMARY KEY NOT NULL,
    api_key_id        TEXT NOT NULL,
    user_id           TEXT NOT NULL,
    model             TEXT NOT NULL,
    provider          TEXT NOT NULL,
    streamed          BOOLEAN NOT NULL,
    outcome           TEXT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    total_tokens      BIGINT NOT NULL,
    estimated         BOOLEAN NOT NULL,
    cost_micros       BIGINT NOT NULL,
    priced            BOOLEAN NOT NULL,
    latency_ms        BIGINT NOT NULL,
    started_at        TIMESTAMP(6) NOT NULL
);
-- The caller's records newest first (keyset paging), and retention pruning by age.
CREATE INDEX usage_records_user_started_idx ON usage_records (user_id, started_at, request_id);
CREATE INDEX usage_records_started_idx ON usage_records (started_at);

CREATE TABLE usage_daily (
    api_key_id         TEXT NOT NULL,
    model              TEXT NOT NULL,
    day                TEXT NOT NULL, -- UTC day, YYYY-MM-DD
    user_id            TEXT NOT NULL,
    requests           BIGINT NOT NULL,
    prompt_tokens      BIGINT NOT NULL,
    completion_tokens  BIGINT NOT NULL,
    total_tokens       BIGINT NOT NULL,
    cost_micros        BIGINT NOT NULL,
    estimated_requests BIGINT NOT NULL,
    unpriced_requests  BIGINT NOT NULL,
    PRIMARY KEY (api_key_id, model, day)
);
CREATE INDEX usage_daily_user_day_idx ON usage_daily (user_id, day);
