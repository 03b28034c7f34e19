-- The team each group rule that names a team (rather than its id) stands for, per provider:
-- the team found by that name, or made by the rule. One row per provider and name, so that
-- two nodes signing people in at once settle on one team; the rule keeps its team when the
-- team is renamed.
CREATE TABLE sso_rule_teams (
    provider TEXT NOT NULL,
    team_name TEXT NOT NULL,
    team_id TEXT NOT NULL,
    PRIMARY KEY (provider, team_name)
);
