-- What a user sees of their sessions (GET /auth/sessions): the client that started
-- it (User-Agent, cut to 256 characters; the address through the trusted-proxy rules) and its
-- last refresh.
ALTER TABLE sessions ADD COLUMN user_agent TEXT;
ALTER TABLE sessions ADD COLUMN ip TEXT;
ALTER TABLE sessions ADD COLUMN last_used_at TIMESTAMP(6);

-- The audit trail: one row per security event, written in the transaction of the change it
-- records. `user_id` is the account the event concerns (what GET /audit shows its owner);
-- `actor` who acted (a user id or an API key id; NULL: nobody authenticated, or the operator
-- CLI). `details` is JSON and never holds a secret.
CREATE TABLE audit_events (
    id         TEXT PRIMARY KEY NOT NULL,
    at         TIMESTAMP(6) NOT NULL,
    user_id    TEXT,
    actor      TEXT,
    action     TEXT NOT NULL,
    target     TEXT,
    ip         TEXT,
    user_agent TEXT,
    request_id TEXT,
    details    TEXT NOT NULL
);
CREATE INDEX audit_events_user_id_idx ON audit_events (user_id, id);
CREATE INDEX audit_events_action_idx ON audit_events (action, id);
CREATE INDEX audit_events_at_idx ON audit_events (at);

-- Invitations (auth.registration = "invite"): single use, for one e-mail, until expires_at.
-- Only the token's SHA-256 digest is stored.
CREATE TABLE invitations (
    id         TEXT PRIMARY KEY NOT NULL,
    email      TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    created_by TEXT NOT NULL,
    created_at TIMESTAMP(6) NOT NULL,
    expires_at TIMESTAMP(6) NOT NULL,
    used_at    TIMESTAMP(6)
);
