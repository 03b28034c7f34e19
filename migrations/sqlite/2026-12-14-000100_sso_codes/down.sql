DROP TABLE sso_codes;
