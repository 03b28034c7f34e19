ALTER TABLE api_keys DROP COLUMN created_by;
DROP INDEX calls_in_flight_user_idx;
ALTER TABLE teams DROP COLUMN require_scoped_keys;
ALTER TABLE users DROP COLUMN budget_micros;
