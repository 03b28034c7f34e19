-- When the account proved it receives mail at its address (NULL: never). Set by an e-mail
-- verification link, an e-mail change link and a password reset (docs/accounts.md).
ALTER TABLE users ADD COLUMN email_verified_at TIMESTAMP(6);

-- Single-use tokens sent to an account's address: verify_email and change_email (24 h),
-- reset_password (30 min). Only the SHA-256 digest of a token is kept. email is the address
-- the token was sent to: the account's address when issued (verify_email, reset_password: the
-- token is void once the account has another) or the new one (change_email). used_at is set
-- when the token is redeemed or withdrawn (a newer token of the same purpose, a password
-- reset); rows are pruned a day after they expire.
CREATE TABLE account_tokens (
    id         TEXT PRIMARY KEY NOT NULL,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    purpose    TEXT NOT NULL,
    digest     TEXT NOT NULL UNIQUE,
    email      TEXT NOT NULL,
    created_at TIMESTAMP(6) NOT NULL,
    expires_at TIMESTAMP(6) NOT NULL,
    used_at    TIMESTAMP(6)
);
CREATE INDEX account_tokens_user_idx ON account_tokens (user_id, purpose);
CREATE INDEX account_tokens_expires_idx ON account_tokens (expires_at);
