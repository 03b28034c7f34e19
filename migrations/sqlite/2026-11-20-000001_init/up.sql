-- aigw schema, SQLite flavour. Timestamps are UTC, stored by diesel as TEXT ('YYYY-MM-DD HH:MM:SS[.ffffff]').
CREATE TABLE users (
    id            TEXT PRIMARY KEY NOT NULL,
    email         TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL,
    role          TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_at    TIMESTAMP NOT NULL,
    updated_at    TIMESTAMP NOT NULL
);

-- A session starts at login (or register); its refresh tokens form one rotation chain (family).
CREATE TABLE sessions (
    id             TEXT PRIMARY KEY NOT NULL,
    user_id        TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at     TIMESTAMP NOT NULL,
    expires_at     TIMESTAMP NOT NULL,
    revoked_at     TIMESTAMP,
    revoked_reason TEXT
);
CREATE INDEX sessions_user_id_idx ON sessions (user_id);

CREATE TABLE refresh_tokens (
    id               TEXT PRIMARY KEY NOT NULL,
    session_id       TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    token_hash       TEXT NOT NULL UNIQUE,
    parent_id        TEXT,
    created_at       TIMESTAMP NOT NULL,
    rotated_at       TIMESTAMP,
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
    expires_at   TIMESTAMP,
    created_at   TIMESTAMP NOT NULL,
    revoked_at   TIMESTAMP,
    last_used_at TIMESTAMP
);
CREATE INDEX api_keys_user_id_idx ON api_keys (user_id);
