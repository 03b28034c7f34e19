-- An admin can revoke an open invitation to register (NULL: not revoked).
ALTER TABLE invitations ADD COLUMN revoked_at TIMESTAMP(6);
