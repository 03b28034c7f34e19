//! What the use cases return: plain data, rendered by the HTTP layer.

use aigw_domain::{PermissionSet, Role};
use aigw_persistence::models::{ApiKeyRow, UserRow};
use chrono::{DateTime, Utc};

/// A user as shown to its owner (seed §2 "User").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserView {
    /// UUIDv7 string.
    pub id: String,
    /// Normalised e-mail address.
    pub email: String,
    /// Display name.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Creation time, UTC.
    pub created_at: DateTime<Utc>,
}

impl From<&UserRow> for UserView {
    fn from(row: &UserRow) -> Self {
        Self {
            id: row.id.clone(),
            email: row.email.clone(),
            name: row.name.clone(),
            role: row.role,
            created_at: row.created_at,
        }
    }
}

/// A token set (seed §2 "Token set"): returned by register, login and refresh.
#[derive(Debug, Clone)]
pub struct TokenSet {
    /// The user the tokens belong to.
    pub user: UserView,
    /// JWT access token.
    pub access_token: String,
    /// Expiry of the access token, UTC.
    pub expires_at: DateTime<Utc>,
    /// Lifetime of the access token, in seconds.
    pub expires_in: u64,
    /// Opaque refresh token (`aigwr_…`).
    pub refresh_token: String,
    /// The session the tokens belong to.
    pub session_id: String,
}

/// An API key as listed (never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyView {
    /// UUIDv7 string.
    pub id: String,
    /// Label.
    pub name: String,
    /// First 12 characters of the key.
    pub key_prefix: String,
    /// Permissions.
    pub permissions: PermissionSet,
    /// Optional expiry, UTC.
    pub expires_at: Option<DateTime<Utc>>,
    /// Creation time, UTC.
    pub created_at: DateTime<Utc>,
    /// Revocation time, UTC.
    pub revoked_at: Option<DateTime<Utc>>,
    /// Last use, UTC (recorded at most once a minute).
    pub last_used_at: Option<DateTime<Utc>>,
}

impl From<&ApiKeyRow> for ApiKeyView {
    fn from(row: &ApiKeyRow) -> Self {
        Self {
            id: row.id.clone(),
            name: row.name.clone(),
            key_prefix: row.key_prefix.clone(),
            permissions: row.permissions.clone(),
            expires_at: row.expires_at,
            created_at: row.created_at,
            revoked_at: row.revoked_at,
            last_used_at: row.last_used_at,
        }
    }
}

/// A newly created API key: the view plus the full secret, shown only this once.
#[derive(Debug, Clone)]
pub struct CreatedApiKey {
    /// The stored key.
    pub view: ApiKeyView,
    /// The full key (`aigw_…`).
    pub key: String,
}
