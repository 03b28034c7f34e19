-- The accounts that sign in through an OpenID Connect provider: one row per provider and
-- subject (the provider's stable id of the person), pointing at the account it signs in to.
-- The address the provider last asserted is kept for the operator; the account follows the
-- subject, not the address.
CREATE TABLE sso_identities (
    provider TEXT NOT NULL,
    subject TEXT NOT NULL,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    email TEXT,
    created_at TIMESTAMP NOT NULL,
    last_sign_in_at TIMESTAMP NOT NULL,
    PRIMARY KEY (provider, subject)
);
CREATE INDEX sso_identities_user_idx ON sso_identities (user_id);
-- The `state` of each sign-in that came back, by digest: a second return with the same
-- state (a replayed callback) finds its row and is refused. Pruned once past the sign-in's
-- lifetime.
CREATE TABLE sso_states (
    state_hash TEXT PRIMARY KEY NOT NULL,
    created_at TIMESTAMP NOT NULL
);
