-- The team memberships a provider's group rules granted, per provider and account: a later
-- sign-in whose groups no longer grant one removes it, and leaves memberships made by hand
-- alone.
CREATE TABLE sso_memberships (
    provider TEXT NOT NULL,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    PRIMARY KEY (provider, user_id, team_id)
);
