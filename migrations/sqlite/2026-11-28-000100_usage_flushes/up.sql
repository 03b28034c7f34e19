-- The usage ledger is written as flushes: per interval, a node's calls summed per rollup row.
-- Each flush's id (a UUIDv7) is recorded in the transaction that adds its sums, so a flush
-- applied twice (the spool file replayed after a crash) counts once. Rows are pruned with the
-- raw records (usage.retention_days).
CREATE TABLE usage_flushes (
    flush_id   TEXT PRIMARY KEY NOT NULL,
    applied_at TIMESTAMP NOT NULL
);
CREATE INDEX usage_flushes_applied_idx ON usage_flushes (applied_at);

-- A call in flight billed as interrupted by another node keeps its row, marked billed_at, so
-- that its own node, if it was only cut off and still records the call, finds it billed and
-- does not count it again. Such rows are pruned with the raw records.
ALTER TABLE calls_in_flight ADD COLUMN billed_at TIMESTAMP;
