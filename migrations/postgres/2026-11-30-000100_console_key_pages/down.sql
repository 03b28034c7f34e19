CREATE INDEX api_keys_user_id_idx ON api_keys (user_id);
DROP INDEX api_keys_user_page_idx;
