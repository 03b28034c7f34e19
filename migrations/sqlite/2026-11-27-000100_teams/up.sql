-- Teams: a group of users sharing a budget, rate limits and models (docs/teams.md). Limits
-- have a key's meaning: allowed_models and metadata are JSON text, max_budget_micros and
-- member_budget_micros are micro-USD, budget_period is daily / weekly / monthly / total
-- (NULL: total). A deleted team keeps its row (deleted_at) so that its usage history still
-- names it.
CREATE TABLE teams (
    id                   TEXT PRIMARY KEY NOT NULL,
    name                 TEXT NOT NULL,
    created_by           TEXT NOT NULL,
    created_at           TIMESTAMP NOT NULL,
    updated_at           TIMESTAMP NOT NULL,
    deleted_at           TIMESTAMP,
    allowed_models       TEXT,
    max_budget_micros    BIGINT,
    budget_period        TEXT,
    rpm_limit            BIGINT,
    tpm_limit            BIGINT,
    metadata             TEXT,
    member_budget_micros BIGINT,
    budget_mode          TEXT
);

-- Memberships: role is owner / admin / member; budget_micros overrides the team's
-- member_budget_micros for this member (micro-USD, NULL: the team's default).
CREATE TABLE team_members (
    team_id       TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    user_id       TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role          TEXT NOT NULL,
    budget_micros BIGINT,
    created_at    TIMESTAMP NOT NULL,
    PRIMARY KEY (team_id, user_id)
);
CREATE INDEX team_members_user_idx ON team_members (user_id, team_id);

-- Invitations to a team for an address with no account yet: registering with it adds the
-- membership. email is stored normalised, as users.email.
CREATE TABLE team_invitations (
    id          TEXT PRIMARY KEY NOT NULL,
    team_id     TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    email       TEXT NOT NULL,
    role        TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL,
    accepted_at TIMESTAMP,
    revoked_at  TIMESTAMP
);
CREATE UNIQUE INDEX team_invitations_open_idx ON team_invitations (team_id, email)
    WHERE accepted_at IS NULL AND revoked_at IS NULL;
CREATE INDEX team_invitations_email_idx ON team_invitations (email);

-- A key scoped to a team (team_id set): a member's own key counts against the key, the member
-- and the team; a team key (team_owned) belongs to the team and counts against the key and the
-- team; its user_id records who created it.
ALTER TABLE api_keys ADD COLUMN team_id TEXT;
ALTER TABLE api_keys ADD COLUMN team_owned BOOLEAN NOT NULL DEFAULT FALSE;
-- What a key's budget does with a call whose worst case does not fit: refuse (NULL) or clamp
-- (lower its max_tokens to what is left); teams.budget_mode likewise for the team's budget.
ALTER TABLE api_keys ADD COLUMN budget_mode TEXT;
CREATE INDEX api_keys_team_idx ON api_keys (team_id, id);

-- The ledger's rollups and the calls in flight name the team and the member a call counted
-- against (member_id: the key's owner for a member's key, NULL for a team key), so that a team
-- or member budget opens from them whatever happened to the keys since.
ALTER TABLE usage_daily ADD COLUMN team_id TEXT;
ALTER TABLE usage_daily ADD COLUMN member_id TEXT;
CREATE INDEX usage_daily_team_idx ON usage_daily (team_id, day);
ALTER TABLE calls_in_flight ADD COLUMN team_id TEXT;
ALTER TABLE calls_in_flight ADD COLUMN member_id TEXT;
CREATE INDEX calls_in_flight_team_idx ON calls_in_flight (team_id);
