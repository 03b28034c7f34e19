DROP INDEX refresh_tokens_rotated_at_idx;
DROP INDEX sessions_revoked_at_idx;
