ALTER TABLE calls_in_flight DROP COLUMN billed_at;
DROP TABLE usage_flushes;
