//! What the use cases return: plain data, rendered by the HTTP layer.

use aigw_domain::{ApiKeyId, PermissionSet, Role, SessionId, TeamId, UserId};
use aigw_persistence::models::{ApiKeyPolicy, ApiKeyRow, UserRow};
use chrono::{DateTime, Utc};

/// A user as shown to its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserView {
    /// The user's id.
    pub id: UserId,
    /// Normalised e-mail address.
    pub email: String,
    /// Display name.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Creation time, UTC.
    pub created_at: DateTime<Utc>,
    /// Last change of the account, UTC.
    pub updated_at: DateTime<Utc>,
    /// Whether an administrator has disabled the account.
    pub disabled: bool,
    /// When the account proved it receives mail at `email`, UTC; `None`: never.
    pub email_verified_at: Option<DateTime<Utc>>,
    /// The user's own budget across all their keys, micro-USD per `gateway.user_budget_period`
    /// (set by admins); `None`: `gateway.user_budget_usd` applies.
    pub budget_micros: Option<i64>,
}

impl From<&UserRow> for UserView {
    fn from(row: &UserRow) -> Self {
        Self {
            id: row.id.as_str().into(),
            email: row.email.clone(),
            name: row.name.clone(),
            role: row.role,
            created_at: row.created_at,
            updated_at: row.updated_at,
            disabled: row.disabled_at.is_some(),
            email_verified_at: row.email_verified_at,
            budget_micros: row.budget_micros,
        }
    }
}

/// A token set: returned by register, login and refresh. `Debug` never
/// prints the tokens.
#[derive(Clone)]
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
    pub session_id: SessionId,
}

/// An API key as listed (never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyView {
    /// The key's id.
    pub id: ApiKeyId,
    /// The owner's user id.
    pub user_id: UserId,
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
    /// Models, budget, rate limits and metadata.
    pub policy: ApiKeyPolicy,
    /// Last rotation, UTC.
    pub rotated_at: Option<DateTime<Utc>>,
    /// The team the key is scoped to.
    pub team_id: Option<TeamId>,
    /// Whether it is a team key (owned by the team; `user_id` then is who created it).
    pub team_owned: bool,
    /// Who created it: its owner, or a team owner or admin who made it for a member.
    pub created_by: UserId,
}

impl From<&ApiKeyRow> for ApiKeyView {
    fn from(row: &ApiKeyRow) -> Self {
        Self {
            id: row.id.as_str().into(),
            user_id: row.user_id.as_str().into(),
            name: row.name.clone(),
            key_prefix: row.key_prefix.clone(),
            permissions: row.permissions.clone(),
            expires_at: row.expires_at,
            created_at: row.created_at,
            revoked_at: row.revoked_at,
            last_used_at: row.last_used_at,
            policy: row.policy.clone(),
            rotated_at: row.rotated_at,
            team_id: row.team_id.as_deref().map(TeamId::from),
            team_owned: row.team_owned,
            created_by: row.created_by.clone(),
        }
    }
}

/// A newly created API key: the view plus the full secret, shown only this once. `Debug` never
/// prints the secret.
#[derive(Clone)]
pub struct CreatedApiKey {
    /// The stored key.
    pub view: ApiKeyView,
    /// The full key (`aigw_…`).
    pub key: String,
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSet")
            .field("user", &self.user)
            .field("access_token", &"***")
            .field("expires_at", &self.expires_at)
            .field("expires_in", &self.expires_in)
            .field("refresh_token", &"***")
            .field("session_id", &self.session_id)
            .finish()
    }
}

impl std::fmt::Debug for CreatedApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedApiKey").field("view", &self.view).field("key", &"***").finish()
    }
}
