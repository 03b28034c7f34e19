-- The ledger keeps the endpoint (API dialect) of each call and the token kinds nested in the
-- prompt and completion counts: `cached_tokens` and `cache_write_tokens` (parts of
-- `prompt_tokens`), `reasoning_tokens` (part of `completion_tokens`).
--
-- usage_daily: one row per (API key, model, endpoint, UTC day). SQLite cannot change a
-- primary key: the table is rebuilt, its rows copied and its indexes made again. The rows
-- kept so far were all chat completions: they read as `chat`, with no cached or reasoning
-- tokens. Queries by the old key (spend of a key, a team or a member; usage by day, model or
-- key) sum over the endpoints.
CREATE TABLE usage_daily_new (
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
    team_id            TEXT,
    member_id          TEXT,
    endpoint           TEXT NOT NULL DEFAULT 'chat',
    cached_tokens      BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (api_key_id, model, endpoint, day)
);
INSERT INTO usage_daily_new (api_key_id, model, day, user_id, requests, prompt_tokens,
    completion_tokens, total_tokens, cost_micros, estimated_requests, unpriced_requests,
    team_id, member_id)
SELECT api_key_id, model, day, user_id, requests, prompt_tokens, completion_tokens,
    total_tokens, cost_micros, estimated_requests, unpriced_requests, team_id, member_id
FROM usage_daily;
DROP TABLE usage_daily;
ALTER TABLE usage_daily_new RENAME TO usage_daily;
CREATE INDEX usage_daily_user_day_idx ON usage_daily (user_id, day);
CREATE INDEX usage_daily_team_idx ON usage_daily (team_id, day);

-- A call cut by a crash is billed under the endpoint it was made to.
ALTER TABLE calls_in_flight ADD COLUMN endpoint TEXT NOT NULL DEFAULT 'chat';

-- usage_record_batches: each record's array gains four trailing elements,
-- [..., started_at, endpoint, cached_tokens, cache_write_tokens, reasoning_tokens]; arrays
-- written before (14 elements) read as `chat` with zeros. No change to the table.
