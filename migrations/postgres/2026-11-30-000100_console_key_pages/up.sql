-- The console pages a user's keys by id: one index serves the filter and the order.
CREATE INDEX api_keys_user_page_idx ON api_keys (user_id, id);
DROP INDEX api_keys_user_id_idx;
