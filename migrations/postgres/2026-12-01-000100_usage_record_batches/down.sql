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
CREATE INDEX usage_records_user_started_idx ON usage_records (user_id, started_at, request_id);
CREATE INDEX usage_records_started_idx ON usage_records (started_at);
INSERT INTO usage_records
SELECT r ->> 0, r ->> 1, b.user_id, r ->> 2, r ->> 3, (r ->> 4)::boolean, r ->> 5,
    (r ->> 6)::bigint, (r ->> 7)::bigint, (r ->> 8)::bigint, (r ->> 9)::boolean,
    (r ->> 10)::bigint, (r ->> 11)::boolean, (r ->> 12)::bigint,
    to_timestamp((r ->> 13)::bigint / 1000000.0) AT TIME ZONE 'UTC'
FROM usage_record_batches b, json_array_elements(b.body::json) r
ON CONFLICT (request_id) DO NOTHING;
DROP TABLE usage_record_batches;
