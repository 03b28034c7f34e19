-- Readiness write probe: each node upserts its own row, so /readyz notices a database that
-- answers reads but refuses writes (disk full, read-only after failover).
CREATE TABLE health_checks (
    node       TEXT PRIMARY KEY NOT NULL,
    checked_at TIMESTAMP NOT NULL
);
