DROP TABLE leak_reports;
