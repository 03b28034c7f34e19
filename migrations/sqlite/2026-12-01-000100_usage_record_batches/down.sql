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
    started_at        TIMESTAMP NOT NULL
);
CREATE INDEX usage_records_user_started_idx ON usage_records (user_id, started_at, request_id);
CREATE INDEX usage_records_started_idx ON usage_records (started_at);
INSERT OR IGNORE INTO usage_records
SELECT r.value ->> 0, r.value ->> 1, b.user_id, r.value ->> 2, r.value ->> 3, r.value ->> 4,
    r.value ->> 5, r.value ->> 6, r.value ->> 7, r.value ->> 8, r.value ->> 9, r.value ->> 10,
    r.value ->> 11, r.value ->> 12,
    strftime('%Y-%m-%d %H:%M:%f', (r.value ->> 13) / 1000000.0, 'unixepoch')
FROM usage_record_batches b, json_each(b.body) r;
DROP TABLE usage_record_batches;
