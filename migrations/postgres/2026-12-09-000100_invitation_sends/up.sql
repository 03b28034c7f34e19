-- When an invitation to register was last e-mailed (NULL: never, no mailer) and how often:
-- its state reads `sent` or `pending`, and a re-send shows.
ALTER TABLE invitations ADD COLUMN sent_at TIMESTAMP(6);
ALTER TABLE invitations ADD COLUMN sends INTEGER NOT NULL DEFAULT 0;
