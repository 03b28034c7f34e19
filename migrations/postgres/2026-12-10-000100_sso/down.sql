DROP TABLE sso_states;
DROP INDEX sso_identities_user_idx;
DROP TABLE sso_identities;
