//! Rows of the [`crate::schema`] tables, built on the domain's types: timestamps are
//! `DateTime<Utc>`, permissions a [`PermissionSet`], roles a [`Role`]. The repositories take and
//! return these; the diesel records below them (text and `NaiveDateTime` columns) never leave
//! this crate, so no caller re-parses a stored string.

use crate::schema::{api_keys, refresh_tokens, sessions, users};
use aigw_domain::{ApiKeyId, RefreshTokenId, SessionId, TeamId, UserId};
use aigw_domain::{BudgetMode, BudgetPeriod, KeyMetadata, ModelPatterns, PermissionSet, Role};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;
use std::collections::BTreeMap;

/// A UTC `DateTime` as the `NaiveDateTime` stored in a `Timestamp` column.
pub(crate) fn from_utc(t: DateTime<Utc>) -> NaiveDateTime {
    t.naive_utc()
}

/// A stored `Timestamp` (UTC by convention) as a `DateTime<Utc>`.
pub(crate) fn to_utc(t: NaiveDateTime) -> DateTime<Utc> {
    t.and_utc()
}

/// A stored role name as a [`Role`]. A name this version does not know (written by a newer
/// one) reads as the least privileged role, [`Role::User`], and is logged.
fn role_from_storage(stored: &str) -> Role {
    stored.parse().unwrap_or_else(|()| {
        tracing::warn!(role = stored, "unknown stored role; treated as user");
        Role::User
    })
}

/// A user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    /// UUIDv7 string.
    pub id: UserId,
    /// Normalised e-mail address (`aigw_domain::normalize_email`), unique; its UTS 39
    /// skeleton is stored beside it (unique too) when the row is inserted.
    pub email: String,
    /// Display name.
    pub name: String,
    /// Role.
    pub role: Role,
    /// argon2id PHC string.
    pub password_hash: String,
    /// Creation time, UTC (microseconds).
    pub created_at: DateTime<Utc>,
    /// Last change, UTC (microseconds).
    pub updated_at: DateTime<Utc>,
    /// When an administrator disabled the account, UTC; `None`: enabled.
    pub disabled_at: Option<DateTime<Utc>>,
    /// When the account proved it receives mail at `email`, UTC; `None`: never.
    pub email_verified_at: Option<DateTime<Utc>>,
    /// The user's own budget across all their keys, micro-USD per the platform's user budget
    /// period; `None`: the platform default applies.
    pub budget_micros: Option<i64>,
}

/// A login session: each login starts one; its refresh tokens form one rotation family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    /// UUIDv7 string; the `sid` claim of the session's access tokens.
    pub id: SessionId,
    /// Owner.
    pub user_id: UserId,
    /// Login time, UTC.
    pub created_at: DateTime<Utc>,
    /// Absolute end of the session (login + refresh lifetime), UTC; rotation never extends it.
    pub expires_at: DateTime<Utc>,
    /// When the session was revoked (logout, reuse detection), UTC.
    pub revoked_at: Option<DateTime<Utc>>,
    /// Why it was revoked (`logout`, `logout_global`, `refresh_token_reuse`, …).
    pub revoked_reason: Option<String>,
    /// The `User-Agent` of the login (at most 256 characters).
    pub user_agent: Option<String>,
    /// The client address of the login (through the trusted-proxy rules).
    pub ip: Option<String>,
    /// The last refresh, UTC (`None`: never refreshed).
    pub last_used_at: Option<DateTime<Utc>>,
    /// How the session was made: RFC 8176 `amr` values joined by spaces (`pwd`, `pwd otp`);
    /// `None` for a session older than the column (read as `pwd`).
    pub amr: Option<String>,
}

/// A refresh token, stored as its SHA-256 digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshTokenRow {
    /// UUIDv7 string.
    pub id: RefreshTokenId,
    /// The session (family) this token belongs to.
    pub session_id: SessionId,
    /// SHA-256 hex digest of the token.
    pub token_hash: String,
    /// The token this one replaced, if any.
    pub parent_id: Option<RefreshTokenId>,
    /// Issue time, UTC.
    pub created_at: DateTime<Utc>,
    /// When this token was used and replaced by its successor, UTC.
    pub rotated_at: Option<DateTime<Utc>>,
    /// The successor, encrypted with a server key, kept for the reuse grace window only.
    pub successor_sealed: Option<String>,
}

/// An API key, stored as its SHA-256 digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRow {
    /// UUIDv7 string.
    pub id: ApiKeyId,
    /// Owner.
    pub user_id: UserId,
    /// Label chosen by the creator.
    pub name: String,
    /// First 12 characters of the key, in clear.
    pub key_prefix: String,
    /// SHA-256 hex digest of the full key.
    pub key_hash: String,
    /// Permissions (stored as comma-separated names; unknown names grant nothing).
    pub permissions: PermissionSet,
    /// Optional expiry, UTC.
    pub expires_at: Option<DateTime<Utc>>,
    /// Creation time, UTC.
    pub created_at: DateTime<Utc>,
    /// Revocation time, UTC.
    pub revoked_at: Option<DateTime<Utc>>,
    /// Last successful authentication with the key, UTC (recorded at most once a minute).
    pub last_used_at: Option<DateTime<Utc>>,
    /// What the key spends and calls.
    pub policy: ApiKeyPolicy,
    /// The secret the last rotation replaced (SHA-256 hex), if any.
    pub previous_key_hash: Option<String>,
    /// When the replaced secret stops working, UTC.
    pub previous_key_expires_at: Option<DateTime<Utc>>,
    /// When the key was last rotated, UTC.
    pub rotated_at: Option<DateTime<Utc>>,
    /// The team the key is scoped to (fixed at creation).
    pub team_id: Option<TeamId>,
    /// Whether the key belongs to its team (a team key; `user_id` then records who created it)
    /// rather than to its user.
    pub team_owned: bool,
    /// Who created the key: its owner, or a team owner or admin who made it for a member
    /// (stored `NULL` when it is the owner).
    pub created_by: UserId,
}

/// A key's own limits; every field `None` means "no limit" / "not set".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiKeyPolicy {
    /// Model names or `*` globs the key may call; `None`: every configured model.
    pub allowed_models: Option<ModelPatterns>,
    /// Spend allowed per period, micro-USD.
    pub max_budget_micros: Option<i64>,
    /// The budget's period; `None` behaves as [`BudgetPeriod::Total`].
    pub budget_period: Option<BudgetPeriod>,
    /// Requests per minute, across all nodes.
    pub rpm_limit: Option<i64>,
    /// Tokens (prompt + completion) per minute, across all nodes.
    pub tpm_limit: Option<i64>,
    /// Free-form string metadata.
    pub metadata: Option<KeyMetadata>,
    /// What the budget does with a call whose worst case does not fit; `None` behaves as
    /// [`BudgetMode::Refuse`].
    pub budget_mode: Option<BudgetMode>,
}

impl ApiKeyPolicy {
    /// A policy from its stored columns (a key's or a team's): JSON `allowed_models` and
    /// `metadata`, the period's name, `(rpm_limit, tpm_limit)`.
    pub(crate) fn from_storage(
        allowed_models: Option<&str>,
        (max_budget_micros, budget_period, budget_mode): (Option<i64>, Option<&str>, Option<&str>),
        (rpm_limit, tpm_limit): (Option<i64>, Option<i64>),
        metadata: Option<&str>,
    ) -> Self {
        Self {
            allowed_models: allowed_models.map(models_from_storage),
            max_budget_micros,
            budget_period: budget_period.map(period_from_storage),
            rpm_limit,
            tpm_limit,
            metadata: metadata.map(metadata_from_storage),
            // A mode this version does not know (written by a newer one) refuses: the safe
            // reading.
            budget_mode: budget_mode.map(|m| BudgetMode::parse(m).unwrap_or_default()),
        }
    }
}

/// A change to a key (PATCH): `None` leaves a field alone, `Some(None)` clears it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiKeyChanges {
    /// New label.
    pub name: Option<String>,
    /// New permissions.
    pub permissions: Option<PermissionSet>,
    /// New expiry, or none.
    pub expires_at: Option<Option<DateTime<Utc>>>,
    /// See [`ApiKeyPolicy::allowed_models`].
    pub allowed_models: Option<Option<ModelPatterns>>,
    /// See [`ApiKeyPolicy::max_budget_micros`].
    pub max_budget_micros: Option<Option<i64>>,
    /// See [`ApiKeyPolicy::budget_period`].
    pub budget_period: Option<Option<BudgetPeriod>>,
    /// See [`ApiKeyPolicy::rpm_limit`].
    pub rpm_limit: Option<Option<i64>>,
    /// See [`ApiKeyPolicy::tpm_limit`].
    pub tpm_limit: Option<Option<i64>>,
    /// See [`ApiKeyPolicy::metadata`].
    pub metadata: Option<Option<KeyMetadata>>,
    /// See [`ApiKeyPolicy::budget_mode`].
    pub budget_mode: Option<Option<BudgetMode>>,
}

impl ApiKeyChanges {
    /// The names of the fields this change sets or clears (for the audit trail), in the
    /// order of the key object.
    pub fn field_names(&self) -> Vec<&'static str> {
        [
            ("name", self.name.is_some()),
            ("permissions", self.permissions.is_some()),
            ("expires_at", self.expires_at.is_some()),
            ("allowed_models", self.allowed_models.is_some()),
            ("max_budget_usd", self.max_budget_micros.is_some()),
            ("budget_period", self.budget_period.is_some()),
            ("rpm_limit", self.rpm_limit.is_some()),
            ("tpm_limit", self.tpm_limit.is_some()),
            ("metadata", self.metadata.is_some()),
            ("budget_mode", self.budget_mode.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }

    /// Whether the change sets nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The stored form of [`UserRow`].
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = users)]
pub(crate) struct UserRecord {
    id: String,
    email: String,
    name: String,
    role: String,
    password_hash: String,
    created_at: NaiveDateTime,
    updated_at: NaiveDateTime,
    disabled_at: Option<NaiveDateTime>,
    email_skeleton: Option<String>,
    email_verified_at: Option<NaiveDateTime>,
    budget_micros: Option<i64>,
}

impl From<UserRecord> for UserRow {
    fn from(r: UserRecord) -> Self {
        Self {
            role: role_from_storage(&r.role),
            id: r.id.into(),
            email: r.email,
            name: r.name,
            password_hash: r.password_hash,
            created_at: to_utc(r.created_at),
            updated_at: to_utc(r.updated_at),
            disabled_at: r.disabled_at.map(to_utc),
            email_verified_at: r.email_verified_at.map(to_utc),
            budget_micros: r.budget_micros,
        }
    }
}

impl From<&UserRow> for UserRecord {
    fn from(r: &UserRow) -> Self {
        Self {
            id: r.id.to_string(),
            email: r.email.clone(),
            name: r.name.clone(),
            role: r.role.as_str().to_owned(),
            password_hash: r.password_hash.clone(),
            created_at: from_utc(r.created_at),
            updated_at: from_utc(r.updated_at),
            disabled_at: r.disabled_at.map(from_utc),
            // Derived here, at the one place a user row is written whole, so it always
            // matches the address.
            email_skeleton: Some(aigw_domain::email_skeleton(&r.email)),
            email_verified_at: r.email_verified_at.map(from_utc),
            budget_micros: r.budget_micros,
        }
    }
}

/// The stored form of [`SessionRow`].
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = sessions)]
pub(crate) struct SessionRecord {
    id: String,
    user_id: String,
    created_at: NaiveDateTime,
    expires_at: NaiveDateTime,
    revoked_at: Option<NaiveDateTime>,
    revoked_reason: Option<String>,
    user_agent: Option<String>,
    ip: Option<String>,
    last_used_at: Option<NaiveDateTime>,
    amr: Option<String>,
}

impl From<SessionRecord> for SessionRow {
    fn from(r: SessionRecord) -> Self {
        Self {
            id: r.id.into(),
            user_id: r.user_id.into(),
            created_at: to_utc(r.created_at),
            expires_at: to_utc(r.expires_at),
            revoked_at: r.revoked_at.map(to_utc),
            revoked_reason: r.revoked_reason,
            user_agent: r.user_agent,
            ip: r.ip,
            last_used_at: r.last_used_at.map(to_utc),
            amr: r.amr,
        }
    }
}

impl From<&SessionRow> for SessionRecord {
    fn from(r: &SessionRow) -> Self {
        Self {
            id: r.id.to_string(),
            user_id: r.user_id.to_string(),
            created_at: from_utc(r.created_at),
            expires_at: from_utc(r.expires_at),
            revoked_at: r.revoked_at.map(from_utc),
            revoked_reason: r.revoked_reason.clone(),
            user_agent: r.user_agent.clone(),
            ip: r.ip.clone(),
            last_used_at: r.last_used_at.map(from_utc),
            amr: r.amr.clone(),
        }
    }
}

/// The stored form of [`RefreshTokenRow`].
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = refresh_tokens)]
pub(crate) struct RefreshTokenRecord {
    id: String,
    session_id: String,
    token_hash: String,
    parent_id: Option<String>,
    created_at: NaiveDateTime,
    rotated_at: Option<NaiveDateTime>,
    successor_sealed: Option<String>,
}

impl From<RefreshTokenRecord> for RefreshTokenRow {
    fn from(r: RefreshTokenRecord) -> Self {
        Self {
            id: r.id.into(),
            session_id: r.session_id.into(),
            token_hash: r.token_hash,
            parent_id: r.parent_id.map(RefreshTokenId::from),
            created_at: to_utc(r.created_at),
            rotated_at: r.rotated_at.map(to_utc),
            successor_sealed: r.successor_sealed,
        }
    }
}

impl From<&RefreshTokenRow> for RefreshTokenRecord {
    fn from(r: &RefreshTokenRow) -> Self {
        Self {
            id: r.id.to_string(),
            session_id: r.session_id.to_string(),
            token_hash: r.token_hash.clone(),
            parent_id: r.parent_id.as_ref().map(ToString::to_string),
            created_at: from_utc(r.created_at),
            rotated_at: r.rotated_at.map(from_utc),
            successor_sealed: r.successor_sealed.clone(),
        }
    }
}

/// The stored form of [`ApiKeyRow`].
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = api_keys)]
pub(crate) struct ApiKeyRecord {
    id: String,
    user_id: String,
    name: String,
    key_prefix: String,
    key_hash: String,
    permissions: String,
    expires_at: Option<NaiveDateTime>,
    created_at: NaiveDateTime,
    revoked_at: Option<NaiveDateTime>,
    last_used_at: Option<NaiveDateTime>,
    allowed_models: Option<String>,
    max_budget_micros: Option<i64>,
    budget_period: Option<String>,
    rpm_limit: Option<i64>,
    tpm_limit: Option<i64>,
    metadata: Option<String>,
    previous_key_hash: Option<String>,
    previous_key_expires_at: Option<NaiveDateTime>,
    rotated_at: Option<NaiveDateTime>,
    team_id: Option<String>,
    team_owned: bool,
    budget_mode: Option<String>,
    created_by: Option<String>,
}

/// `allowed_models` as stored: a JSON array of strings.
pub(crate) fn models_to_storage(m: &ModelPatterns) -> String {
    serde_json::to_string(m.as_slice()).unwrap_or_else(|_| "[]".to_owned())
}

/// A stored `allowed_models`. Unreadable text (never written by aigw) allows nothing, the
/// safe reading of a restriction, and is logged.
fn models_from_storage(stored: &str) -> ModelPatterns {
    ModelPatterns::from_storage(serde_json::from_str(stored).unwrap_or_else(|_| {
        tracing::warn!("unreadable stored allowed_models; the key may call no model");
        Vec::new()
    }))
}

/// `metadata` as stored: a JSON object of strings.
pub(crate) fn metadata_to_storage(m: &KeyMetadata) -> String {
    serde_json::to_string(m.entries()).unwrap_or_else(|_| "{}".to_owned())
}

fn metadata_from_storage(stored: &str) -> KeyMetadata {
    KeyMetadata::from_storage(
        serde_json::from_str::<BTreeMap<String, String>>(stored).unwrap_or_default(),
    )
}

/// A stored period name; one this version does not know (written by a newer one) reads as
/// `total`, the period that never resets a budget, and is logged.
fn period_from_storage(stored: &str) -> BudgetPeriod {
    BudgetPeriod::parse(stored).unwrap_or_else(|_| {
        tracing::warn!(period = stored, "unknown stored budget_period; treated as total");
        BudgetPeriod::Total
    })
}

/// The stored form of [`ApiKeyChanges`].
#[derive(Debug, Default, AsChangeset)]
#[diesel(table_name = api_keys)]
pub(crate) struct ApiKeyChangeset {
    name: Option<String>,
    permissions: Option<String>,
    expires_at: Option<Option<NaiveDateTime>>,
    allowed_models: Option<Option<String>>,
    max_budget_micros: Option<Option<i64>>,
    budget_period: Option<Option<String>>,
    rpm_limit: Option<Option<i64>>,
    tpm_limit: Option<Option<i64>>,
    metadata: Option<Option<String>>,
    budget_mode: Option<Option<String>>,
}

impl From<&ApiKeyChanges> for ApiKeyChangeset {
    fn from(c: &ApiKeyChanges) -> Self {
        Self {
            name: c.name.clone(),
            permissions: c.permissions.as_ref().map(PermissionSet::to_storage),
            expires_at: c.expires_at.map(|t| t.map(from_utc)),
            allowed_models: c.allowed_models.as_ref().map(|m| m.as_ref().map(models_to_storage)),
            max_budget_micros: c.max_budget_micros,
            budget_period: c.budget_period.map(|p| p.map(|p| p.as_str().to_owned())),
            rpm_limit: c.rpm_limit,
            tpm_limit: c.tpm_limit,
            metadata: c.metadata.as_ref().map(|m| m.as_ref().map(metadata_to_storage)),
            budget_mode: c.budget_mode.map(|m| m.map(|m| m.as_str().to_owned())),
        }
    }
}

impl From<ApiKeyRecord> for ApiKeyRow {
    fn from(r: ApiKeyRecord) -> Self {
        Self {
            policy: ApiKeyPolicy::from_storage(
                r.allowed_models.as_deref(),
                (r.max_budget_micros, r.budget_period.as_deref(), r.budget_mode.as_deref()),
                (r.rpm_limit, r.tpm_limit),
                r.metadata.as_deref(),
            ),
            previous_key_hash: r.previous_key_hash,
            previous_key_expires_at: r.previous_key_expires_at.map(to_utc),
            rotated_at: r.rotated_at.map(to_utc),
            team_id: r.team_id.map(TeamId::from),
            team_owned: r.team_owned,
            permissions: PermissionSet::from_storage(&r.permissions),
            id: r.id.into(),
            created_by: r.created_by.unwrap_or_else(|| r.user_id.clone()).into(),
            user_id: r.user_id.into(),
            name: r.name,
            key_prefix: r.key_prefix,
            key_hash: r.key_hash,
            expires_at: r.expires_at.map(to_utc),
            created_at: to_utc(r.created_at),
            revoked_at: r.revoked_at.map(to_utc),
            last_used_at: r.last_used_at.map(to_utc),
        }
    }
}

impl From<&ApiKeyRow> for ApiKeyRecord {
    fn from(r: &ApiKeyRow) -> Self {
        Self {
            id: r.id.to_string(),
            user_id: r.user_id.to_string(),
            name: r.name.clone(),
            key_prefix: r.key_prefix.clone(),
            key_hash: r.key_hash.clone(),
            permissions: r.permissions.to_storage(),
            expires_at: r.expires_at.map(from_utc),
            created_at: from_utc(r.created_at),
            revoked_at: r.revoked_at.map(from_utc),
            last_used_at: r.last_used_at.map(from_utc),
            allowed_models: r.policy.allowed_models.as_ref().map(models_to_storage),
            max_budget_micros: r.policy.max_budget_micros,
            budget_period: r.policy.budget_period.map(|p| p.as_str().to_owned()),
            rpm_limit: r.policy.rpm_limit,
            tpm_limit: r.policy.tpm_limit,
            metadata: r.policy.metadata.as_ref().map(metadata_to_storage),
            previous_key_hash: r.previous_key_hash.clone(),
            previous_key_expires_at: r.previous_key_expires_at.map(from_utc),
            rotated_at: r.rotated_at.map(from_utc),
            team_id: r.team_id.as_deref().map(str::to_owned),
            team_owned: r.team_owned,
            budget_mode: r.policy.budget_mode.map(|m| m.as_str().to_owned()),
            created_by: (r.created_by != r.user_id).then(|| r.created_by.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aigw_domain::Permission;

    #[test]
    fn rows_round_trip_through_their_records() {
        let now = aigw_domain::time::now();
        let key = ApiKeyRow {
            id: "k".into(),
            user_id: "u".into(),
            name: "n".into(),
            key_prefix: "aigw_1234567".into(),
            key_hash: "h".into(),
            permissions: PermissionSet::from_iter([Permission::Read, Permission::AiGateway]),
            expires_at: Some(now),
            created_at: now,
            revoked_at: None,
            last_used_at: Some(now),
            policy: ApiKeyPolicy::default(),
            previous_key_hash: None,
            previous_key_expires_at: None,
            rotated_at: None,
            team_id: None,
            team_owned: false,
            created_by: "u".into(),
        };
        assert_eq!(ApiKeyRow::from(ApiKeyRecord::from(&key)), key);
        let limited = ApiKeyRow {
            policy: ApiKeyPolicy {
                allowed_models: Some(ModelPatterns::from_storage(vec!["gpt-4o*".into()])),
                max_budget_micros: Some(10_000_000),
                budget_period: Some(BudgetPeriod::Weekly),
                rpm_limit: Some(60),
                tpm_limit: Some(10_000),
                metadata: Some(KeyMetadata::from_storage(BTreeMap::from([(
                    "team".to_owned(),
                    "ml \"core\"".to_owned(),
                )]))),
                budget_mode: Some(BudgetMode::Clamp),
            },
            previous_key_hash: Some("old".into()),
            previous_key_expires_at: Some(now),
            rotated_at: Some(now),
            ..key
        };
        assert_eq!(ApiKeyRow::from(ApiKeyRecord::from(&limited)), limited);
        let user = UserRow {
            id: "u".into(),
            email: "a@example.com".into(),
            name: "a".into(),
            role: Role::Admin,
            password_hash: "$argon2id$".into(),
            created_at: now,
            updated_at: now,
            disabled_at: Some(now),
            email_verified_at: Some(now),
            budget_micros: Some(5_000_000),
        };
        assert_eq!(UserRow::from(UserRecord::from(&user)), user);
        assert_eq!(role_from_storage("superuser"), Role::User);
    }
}
