DROP TABLE usage_daily;
DROP TABLE usage_records;
