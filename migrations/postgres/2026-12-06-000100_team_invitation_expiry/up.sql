-- A team invitation expires (expires_at; NULL: made before invitations expired, never) and is
-- e-mailed: sent_at is when it was last sent (NULL: never, no mailer), sends how many times.
ALTER TABLE team_invitations ADD COLUMN expires_at TIMESTAMP(6);
ALTER TABLE team_invitations ADD COLUMN sent_at TIMESTAMP(6);
ALTER TABLE team_invitations ADD COLUMN sends INTEGER NOT NULL DEFAULT 0;
