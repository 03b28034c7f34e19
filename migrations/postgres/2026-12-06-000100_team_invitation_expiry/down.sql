ALTER TABLE team_invitations DROP COLUMN sends;
ALTER TABLE team_invitations DROP COLUMN sent_at;
ALTER TABLE team_invitations DROP COLUMN expires_at;
