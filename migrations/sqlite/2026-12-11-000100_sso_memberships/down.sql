DROP TABLE sso_memberships;
