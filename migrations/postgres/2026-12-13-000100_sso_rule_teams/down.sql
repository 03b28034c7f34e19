DROP TABLE sso_rule_teams;
