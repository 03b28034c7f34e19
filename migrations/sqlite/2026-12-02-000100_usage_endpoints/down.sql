-- The rows of other endpoints are added to the chat row of their key, model and day, and
-- the table is rebuilt with its former key.
CREATE TABLE usage_daily_old (
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
    PRIMARY KEY (api_key_id, model, day)
);
INSERT INTO usage_daily_old
SELECT api_key_id, model, day, MIN(user_id), SUM(requests), SUM(prompt_tokens),
    SUM(completion_tokens), SUM(total_tokens), SUM(cost_micros), SUM(estimated_requests),
    SUM(unpriced_requests), MIN(team_id), MIN(member_id)
FROM usage_daily
GROUP BY api_key_id, model, day;
DROP TABLE usage_daily;
ALTER TABLE usage_daily_old RENAME TO usage_daily;
CREATE INDEX usage_daily_user_day_idx ON usage_daily (user_id, day);
CREATE INDEX usage_daily_team_idx ON usage_daily (team_id, day);
ALTER TABLE calls_in_flight DROP COLUMN endpoint;
