-- An administrator can disable an account (NULL: enabled). A disabled user cannot log
-- in, has no live session, and their API keys are refused.
ALTER TABLE users ADD COLUMN disabled_at TIMESTAMP(6);
