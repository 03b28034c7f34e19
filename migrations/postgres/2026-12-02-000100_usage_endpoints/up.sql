-- The ledger keeps the endpoint (API dialect) of each call and the token kinds nested in the
-- prompt and completion counts: `cached_tokens` and `cache_write_tokens` (parts of
-- `prompt_tokens`), `reasoning_tokens` (part of `completion_tokens`).
--
-- usage_daily: one row per (API key, model, endpoint, UTC day). The rows kept so far were
-- all chat completions: they read as `chat`, with no cached or reasoning tokens. Queries by
-- the old key (spend of a key, a team or a member; usage by day, model or key) sum over the
-- endpoints.
ALTER TABLE usage_daily ADD COLUMN endpoint TEXT NOT NULL DEFAULT 'chat';
ALTER TABLE usage_daily ADD COLUMN cached_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN reasoning_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily DROP CONSTRAINT usage_daily_pkey;
ALTER TABLE usage_daily ADD PRIMARY KEY (api_key_id, model, endpoint, day);

-- A call cut by a crash is billed under the endpoint it was made to.
ALTER TABLE calls_in_flight ADD COLUMN endpoint TEXT NOT NULL DEFAULT 'chat';

-- usage_record_batches: each record's array gains four trailing elements,
-- [..., started_at, endpoint, cached_tokens, cache_write_tokens, reasoning_tokens]; arrays
-- written before (14 elements) read as `chat` with zeros. No change to the table.
