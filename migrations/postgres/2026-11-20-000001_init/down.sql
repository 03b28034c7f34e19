DROP TABLE api_keys;
DROP TABLE refresh_tokens;
DROP TABLE sessions;
DROP TABLE users;
