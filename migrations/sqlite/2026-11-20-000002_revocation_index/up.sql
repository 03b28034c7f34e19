-- Revocation polling reads recently revoked sessions; sealed successors are swept by rotation time.
CREATE INDEX sessions_revoked_at_idx ON sessions (revoked_at);
CREATE INDEX refresh_tokens_rotated_at_idx ON refresh_tokens (rotated_at);
