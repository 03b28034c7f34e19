-- aigw schema, PostgreSQL flavour. Timestamps are UTC (TIMESTAMP WITHOUT TIME ZONE, microseconds).
CREATE TABLE users (
    id            TEXT PRIMARY KEY NOT NULL,
    email         TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL,
    role          TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_at    TIMESTAMP(6) NOT NULL,
    updated_at    TIMESTAMP(6) NOT NULL
);

-- A session starts at login (or register); its refresh tokens form one rotation chain (family).
CREATE TABLE sessions (
    id             TEXT PRIMARY KEY NOT NULL,
    user_id        TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at     TIMESTAMP(6) NOT NULL,
    expires_at     TIMESTAMP(6) NOT NULL,
    revoked_at     TIMESTAMP(6),
    revoked_reason TEXT
);
CREATE INDEX sessions_user_id_idx ON sessions (user_id);

CREATE TABLE refresh_tokens (
    id               TEXT PRIMARY KEY NOT NULL,
    session_id       TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    token_hash       TEXT NOT NULL UNIQUE,
    parent_id        TEXT,
    created_at       TIMESTAMP(6) NOT NULL,
    rotated_at       TIMESTAMP(6),
    successor_sealed TEXT
);
CREATE INDEX refresh_tokens_session_id_idx ON refresh_tokens (session_id);

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY NOT NULL,
    user_id      TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    key_prefix   TEXT NOT NULL,
    key_hash     TEXT NOT NULL UNIQUE,
    permissions  TEXT NOT NULL,
    expires_at   TIMESTAMP(6),
    created_at   TIMESTAMP(6) NOT NULL,
    revoked_at   TIMESTAMP(6),
    last_used_at TIMESTAMP(6)
);
CREATE INDEX api_keys_user_id_idx ON api_keys (user_id);
