-- Idempotency-Key records (draft-ietf-httpapi-idempotency-key-header): one per caller scope
-- and key. status/response_sealed are null while the first request is in flight; the
-- response is sealed (encrypted), never stored in clear, and the row is deleted after
-- expires_at.
CREATE TABLE idempotency_keys (
    scope           TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    status          INTEGER,
    response_sealed TEXT,
    created_at      TIMESTAMP(6) NOT NULL,
    locked_until    TIMESTAMP(6) NOT NULL,
    expires_at      TIMESTAMP(6) NOT NULL,
    PRIMARY KEY (scope, idempotency_key)
);
CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);
