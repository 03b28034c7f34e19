DROP TABLE invitations;
DROP TABLE audit_events;
ALTER TABLE sessions DROP COLUMN user_agent;
ALTER TABLE sessions DROP COLUMN ip;
ALTER TABLE sessions DROP COLUMN last_used_at;
