//! Rows of the [`crate::schema`] tables. Times are UTC as `NaiveDateTime` (use [`to_utc`] and
//! [`from_utc`] at the boundary).

use crate::schema::{api_keys, refresh_tokens, sessions, users};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

/// A UTC `DateTime` as the `NaiveDateTime` stored in a `Timestamp` column.
pub fn from_utc(t: DateTime<Utc>) -> NaiveDateTime {
    t.naive_utc()
}

/// A stored `Timestamp` (UTC by convention) as a `DateTime<Utc>`.
pub fn to_utc(t: NaiveDateTime) -> DateTime<Utc> {
    t.and_utc()
}

/// A row of `users`.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = users)]
pub struct UserRow {
    /// UUIDv7 string.
    pub id: String,
    /// Normalised (lower-cased) e-mail address, unique.
    pub email: String,
    /// Display name.
    pub name: String,
    /// Role name (`user`, `admin`).
    pub role: String,
    /// argon2id PHC string.
    pub password_hash: String,
    /// Creation time, UTC.
    pub created_at: NaiveDateTime,
    /// Last change, UTC.
    pub updated_at: NaiveDateTime,
}

/// A row of `sessions`.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = sessions)]
pub struct SessionRow {
    /// UUIDv7 string; the `sid` claim of the session's access tokens.
    pub id: String,
    /// Owner.
    pub user_id: String,
    /// Login time, UTC.
    pub created_at: NaiveDateTime,
    /// Absolute end of the session (login + refresh lifetime), UTC; rotation never extends it.
    pub expires_at: NaiveDateTime,
    /// When the session was revoked (logout, reuse detection), UTC.
    pub revoked_at: Option<NaiveDateTime>,
    /// Why it was revoked (`logout`, `logout_global`, `refresh_token_reuse`, …).
    pub revoked_reason: Option<String>,
}

/// A row of `refresh_tokens`.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = refresh_tokens)]
pub struct RefreshTokenRow {
    /// UUIDv7 string.
    pub id: String,
    /// The session (family) this token belongs to.
    pub session_id: String,
    /// SHA-256 hex digest of the token.
    pub token_hash: String,
    /// The token this one replaced, if any.
    pub parent_id: Option<String>,
    /// Issue time, UTC.
    pub created_at: NaiveDateTime,
    /// When this token was used and replaced by its successor, UTC.
    pub rotated_at: Option<NaiveDateTime>,
    /// The successor, encrypted with a server key, kept for the reuse grace window only.
    pub successor_sealed: Option<String>,
}

/// A row of `api_keys`.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = api_keys)]
pub struct ApiKeyRow {
    /// UUIDv7 string.
    pub id: String,
    /// Owner.
    pub user_id: String,
    /// Label chosen by the creator.
    pub name: String,
    /// First 12 characters of the key, in clear.
    pub key_prefix: String,
    /// SHA-256 hex digest of the full key.
    pub key_hash: String,
    /// Comma-separated permission names.
    pub permissions: String,
    /// Optional expiry, UTC.
    pub expires_at: Option<NaiveDateTime>,
    /// Creation time, UTC.
    pub created_at: NaiveDateTime,
    /// Revocation time, UTC.
    pub revoked_at: Option<NaiveDateTime>,
    /// Last successful authentication with the key, UTC (updated at most once a minute).
    pub last_used_at: Option<NaiveDateTime>,
}
