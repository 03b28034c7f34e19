ALTER TABLE invitations DROP COLUMN revoked_at;
