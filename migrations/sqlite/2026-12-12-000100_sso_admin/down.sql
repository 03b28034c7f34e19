ALTER TABLE sso_identities DROP COLUMN granted_admin;
