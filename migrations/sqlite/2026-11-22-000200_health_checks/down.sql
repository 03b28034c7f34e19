DROP TABLE health_checks;
