-- Per-request usage records stored in batches: one row per (user, UTC minute of the calls'
-- start) per flush, at most 1,000 records each, instead of one row per call. A flush of
-- 300,000 calls is then a few hundred rows, and the cost of keeping records no longer grows
-- with three indexes per call. `body` is a JSON array with one array per record:
-- [request_id, api_key_id, model, provider, streamed, outcome, prompt_tokens,
--  completion_tokens, total_tokens, estimated, cost_micros, priced, latency_ms,
--  started_at (microseconds since the Unix epoch, UTC)].
-- The oldest and newest (started_at, request_id) of a batch bound its records for paging
-- newest first; retention deletes a batch once its newest record is older than the cutoff.
CREATE TABLE usage_record_batches (
    id                INTEGER PRIMARY KEY NOT NULL,
    user_id           TEXT NOT NULL,
    records           BIGINT NOT NULL,
    oldest_started_at TIMESTAMP NOT NULL,
    oldest_request_id TEXT NOT NULL,
    newest_started_at TIMESTAMP NOT NULL,
    newest_request_id TEXT NOT NULL,
    body              TEXT NOT NULL
);
CREATE INDEX usage_record_batches_user_newest_idx
    ON usage_record_batches (user_id, newest_started_at, newest_request_id);
CREATE INDEX usage_record_batches_newest_idx ON usage_record_batches (newest_started_at);

-- The rows kept so far, one batch per user and minute (SQLite's `TIMESTAMP` text is
-- `YYYY-MM-DD HH:MM:SS[.fraction]`).
INSERT INTO usage_record_batches (user_id, records, oldest_started_at, oldest_request_id,
    newest_started_at, newest_request_id, body)
SELECT user_id, COUNT(*), MIN(started_at), MIN(request_id), MAX(started_at), MAX(request_id),
    json_group_array(json_array(request_id, api_key_id, model, provider,
        json(CASE WHEN streamed THEN 'true' ELSE 'false' END), outcome, prompt_tokens,
        completion_tokens, total_tokens,
        json(CASE WHEN estimated THEN 'true' ELSE 'false' END), cost_micros,
        json(CASE WHEN priced THEN 'true' ELSE 'false' END), latency_ms,
        CAST(strftime('%s', started_at) AS INTEGER) * 1000000
            + CAST(substr(substr(started_at, 21) || '000000', 1, 6) AS INTEGER)))
FROM usage_records
GROUP BY user_id, substr(started_at, 1, 16);

DROP TABLE usage_records;
