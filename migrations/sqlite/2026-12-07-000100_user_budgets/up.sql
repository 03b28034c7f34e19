-- A user's own budget in micro-USD per gateway.user_budget_period, across every key of theirs
-- (personal and scoped to a team; not team keys); NULL: gateway.user_budget_usd applies.
ALTER TABLE users ADD COLUMN budget_micros BIGINT;
-- Whether the team's members must make gateway calls with keys scoped to the team: their
-- personal keys are then refused for gateway calls.
ALTER TABLE teams ADD COLUMN require_scoped_keys BOOLEAN NOT NULL DEFAULT FALSE;
-- A user's budget counter opens from the calls in flight of their keys.
CREATE INDEX calls_in_flight_user_idx ON calls_in_flight (user_id);
-- Who created a key when it is not its owner: a team's owner or admin who made it for a
-- member of the team (NULL: the owner).
ALTER TABLE api_keys ADD COLUMN created_by TEXT;
