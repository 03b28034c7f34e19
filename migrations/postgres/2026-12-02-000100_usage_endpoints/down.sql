-- The rows of other endpoints are added to the chat row of their key, model and day.
INSERT INTO usage_daily (api_key_id, model, endpoint, day, user_id, requests, prompt_tokens,
    completion_tokens, total_tokens, cost_micros, estimated_requests, unpriced_requests,
    team_id, member_id)
SELECT api_key_id, model, 'chat', day, MIN(user_id), SUM(requests), SUM(prompt_tokens),
    SUM(completion_tokens), SUM(total_tokens), SUM(cost_micros), SUM(estimated_requests),
    SUM(unpriced_requests), MIN(team_id), MIN(member_id)
FROM usage_daily WHERE endpoint <> 'chat'
GROUP BY api_key_id, model, day
ON CONFLICT (api_key_id, model, endpoint, day) DO UPDATE SET
    requests = usage_daily.requests + excluded.requests,
    prompt_tokens = usage_daily.prompt_tokens + excluded.prompt_tokens,
    completion_tokens = usage_daily.completion_tokens + excluded.completion_tokens,
    total_tokens = usage_daily.total_tokens + excluded.total_tokens,
    cost_micros = usage_daily.cost_micros + excluded.cost_micros,
    estimated_requests = usage_daily.estimated_requests + excluded.estimated_requests,
    unpriced_requests = usage_daily.unpriced_requests + excluded.unpriced_requests;
DELETE FROM usage_daily WHERE endpoint <> 'chat';
ALTER TABLE usage_daily DROP CONSTRAINT usage_daily_pkey;
ALTER TABLE usage_daily ADD PRIMARY KEY (api_key_id, model, day);
ALTER TABLE usage_daily DROP COLUMN reasoning_tokens;
ALTER TABLE usage_daily DROP COLUMN cache_write_tokens;
ALTER TABLE usage_daily DROP COLUMN cached_tokens;
ALTER TABLE usage_daily DROP COLUMN endpoint;
ALTER TABLE calls_in_flight DROP COLUMN endpoint;
