ALTER TABLE invitations DROP COLUMN sends;
ALTER TABLE invitations DROP COLUMN sent_at;
