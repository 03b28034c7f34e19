DROP TABLE account_tokens;
ALTER TABLE users DROP COLUMN email_verified_at;
