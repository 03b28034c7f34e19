-- Whether a provider's admin_groups made the account a platform admin: a later sign-in
-- outside those groups takes the role back only then (a role given by hand stays).
ALTER TABLE sso_identities ADD COLUMN granted_admin BOOLEAN NOT NULL DEFAULT FALSE;
