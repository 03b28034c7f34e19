-- A user's TOTP second factor (RFC 6238), at most one per user. secret_sealed is the base32
-- secret sealed with a key derived from the signing keys (it must be recoverable to check a
-- code); enabled_at is NULL while the enrollment waits for its first code. last_used_step is
-- the last accepted time step (Unix seconds / 30): a code is accepted only for a later step,
-- by a compare-and-set, so a code works once even across nodes.
CREATE TABLE mfa_totp (
    user_id        TEXT PRIMARY KEY NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    secret_sealed  TEXT NOT NULL,
    created_at     TIMESTAMP NOT NULL,
    enabled_at     TIMESTAMP,
    last_used_step BIGINT
);

-- Single-use recovery codes, stored as SHA-256 digests; a regeneration replaces them all.
CREATE TABLE mfa_recovery_codes (
    id         TEXT PRIMARY KEY NOT NULL,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    code_hash  TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    used_at    TIMESTAMP
);
CREATE UNIQUE INDEX mfa_recovery_codes_user_hash_idx ON mfa_recovery_codes (user_id, code_hash);

-- MFA challenges: a right password of a user with a second factor gets one instead of a
-- session; the token is stored as its digest. attempts counts the codes tried (at most 5);
-- used_at is set when one completed the login.
CREATE TABLE mfa_challenges (
    id         TEXT PRIMARY KEY NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL,
    attempts   BIGINT NOT NULL DEFAULT 0,
    used_at    TIMESTAMP
);
CREATE INDEX mfa_challenges_user_idx ON mfa_challenges (user_id, expires_at);

-- How a session was made (RFC 8176 amr values joined by spaces: 'pwd' or 'pwd otp'); NULL in
-- sessions older than this column, read as 'pwd'.
ALTER TABLE sessions ADD COLUMN amr TEXT;
