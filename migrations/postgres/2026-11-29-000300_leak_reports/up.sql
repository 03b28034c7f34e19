-- Reports of leaked API keys: one row per report received (GitHub's secret scanning, an
-- admin's or an operator's pasted list), written first in the transaction that revokes its keys
-- (which are named in the audit trail, with the report's id).
-- A signed report is stored with the SHA-256 of its exact body; the unique index refuses the
-- same signed body a second time (a replay), so it can revoke and audit only once. A pasted
-- list has no digest (NULL is never equal to NULL, so any number of them are kept).
CREATE TABLE leak_reports (
    id          TEXT PRIMARY KEY NOT NULL,
    reporter    TEXT NOT NULL,
    body_digest TEXT,
    received_at TIMESTAMP(6) NOT NULL,
    tokens      BIGINT NOT NULL
);
CREATE UNIQUE INDEX leak_reports_body_digest_idx ON leak_reports (body_digest);
