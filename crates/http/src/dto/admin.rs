//! Bodies of the administration API (`/api/v1/admin/…`) with their OpenAPI schemas.

use aigw_domain::time::format_timestamp;
use aigw_domain::Role;
use aigw_service::{ApiKeyView, Page, UserView};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A user as an administrator sees it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AdminUserDto {
    /// UUIDv7.
    pub(crate) id: String,
    /// E-mail address (normalised: NFKC, lower case).
    pub(crate) email: String,
    /// Display name.
    pub(crate) name: String,
    /// `user` or `admin`.
    #[schema(value_type = RoleName)]
    pub(crate) role: String,
    /// Whether the account is disabled (no login, no session, its API keys refused).
    pub(crate) disabled: bool,
    /// RFC 3339 UTC.
    pub(crate) created_at: String,
    /// Last change of the account, RFC 3339 UTC.
    pub(crate) updated_at: String,
    /// When the account proved it receives mail at `email` (RFC 3339 UTC); `null`: not yet.
    pub(crate) email_verified_at: Option<String>,
    /// The user's own budget across all their keys (personal and scoped to a team; not team
    /// keys), USD per `gateway.user_budget_period`; `null`: `gateway.user_budget_usd` applies
    /// (docs/budgets.md "A user's budget").
    pub(crate) budget_usd: Option<f64>,
}

impl From<UserView> for AdminUserDto {
    fn from(u: UserView) -> Self {
        Self {
            id: u.id.into(),
            email: u.email,
            name: u.name,
            role: u.role.as_str().to_owned(),
            disabled: u.disabled,
            created_at: format_timestamp(u.created_at),
            updated_at: format_timestamp(u.updated_at),
            email_verified_at: u.email_verified_at.map(format_timestamp),
            budget_usd: u
                .budget_micros
                .map(|m| aigw_domain::usage::micros_to_usd(u64::try_from(m).unwrap_or(0))),
        }
    }
}

/// A user role.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = RoleName)]
pub(crate) enum RoleName {
    /// An ordinary account.
    User,
    /// An administrator: may call `/api/v1/admin/…`.
    Admin,
}

impl From<RoleName> for Role {
    fn from(r: RoleName) -> Self {
        match r {
            RoleName::User => Role::User,
            RoleName::Admin => Role::Admin,
        }
    }
}

/// `PATCH /admin/users/{id}` body: at least one field; `role` and `disabled` may not be `null`
/// (400 naming it), `budget_usd` may (it clears the budget).
/// Its schema's `minProperties` is set in [`crate::openapi`] (utoipa 5.5's `min_properties`
/// writes `maxProperties`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateUserRequest {
    /// The new role. An admin cannot demote themselves (400).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false)]
    pub(crate) role: Option<RoleName>,
    /// `true` disables the account (ends its sessions; its keys answer 401), `false`
    /// re-enables it (the keys work again; the sessions stay ended). An admin cannot disable
    /// themselves (400).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false)]
    pub(crate) disabled: Option<bool>,
    /// The user's own budget across all their keys, USD per `gateway.user_budget_period`;
    /// `null` clears it (`gateway.user_budget_usd` applies again).
    #[serde(default, deserialize_with = "super::present")]
    #[schema(value_type = Option<f64>, nullable, minimum = 0, maximum = 1_000_000_000)]
    pub(crate) budget_usd: Option<Option<f64>>,
}

/// A field that may be absent (`None`) but not `null`: a `null` is serde's "invalid type:
/// null" error, which the JSON extractor answers with 400 naming the field.
fn not_null<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// `GET /admin/users` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UserListData {
    /// Users, newest first.
    pub(crate) users: Vec<AdminUserDto>,
    /// Cursor of the next page (pass as `cursor`); null on the last page.
    pub(crate) next_cursor: Option<String>,
}

impl From<Page<UserView>> for UserListData {
    fn from(p: Page<UserView>) -> Self {
        Self { users: p.items.into_iter().map(Into::into).collect(), next_cursor: p.next_cursor }
    }
}

/// An API key as an administrator sees it (never the secret).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AdminApiKeyDto {
    /// UUIDv7.
    pub(crate) id: String,
    /// The owner's user id.
    pub(crate) user_id: String,
    /// Label.
    pub(crate) name: String,
    /// First 12 characters of the key.
    pub(crate) key_prefix: String,
    /// Permissions.
    pub(crate) permissions: Vec<String>,
    /// Expiry, RFC 3339 UTC, or null for none.
    pub(crate) expires_at: Option<String>,
    /// RFC 3339 UTC.
    pub(crate) created_at: String,
    /// Revocation time, or null.
    pub(crate) revoked_at: Option<String>,
    /// Last use (recorded at most once a minute), or null.
    pub(crate) last_used_at: Option<String>,
    /// The team the key is scoped to, or null (a personal key).
    pub(crate) team_id: Option<String>,
    /// Whether it is a team key (the team's; `user_id` is who made it) rather than a member's
    /// key scoped to the team.
    pub(crate) team_owned: bool,
    /// Who made it: its owner, or a team's owner or admin who made it for the member.
    pub(crate) created_by: String,
}

impl From<ApiKeyView> for AdminApiKeyDto {
    fn from(k: ApiKeyView) -> Self {
        Self {
            id: k.id.into(),
            user_id: k.user_id.into(),
            name: k.name,
            key_prefix: k.key_prefix,
            permissions: k.permissions.names(),
            expires_at: k.expires_at.map(format_timestamp),
            created_at: format_timestamp(k.created_at),
            revoked_at: k.revoked_at.map(format_timestamp),
            last_used_at: k.last_used_at.map(format_timestamp),
            team_id: k.team_id.map(String::from),
            team_owned: k.team_owned,
            created_by: k.created_by.into(),
        }
    }
}

/// `GET /admin/api-keys` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AdminApiKeyListData {
    /// Keys, newest first.
    pub(crate) api_keys: Vec<AdminApiKeyDto>,
    /// Cursor of the next page (pass as `cursor`); null on the last page.
    pub(crate) next_cursor: Option<String>,
}

impl From<Page<ApiKeyView>> for AdminApiKeyListData {
    fn from(p: Page<ApiKeyView>) -> Self {
        Self { api_keys: p.items.into_iter().map(Into::into).collect(), next_cursor: p.next_cursor }
    }
}

/// `POST /admin/invitations` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateInvitationRequest {
    /// The e-mail address that may register with the invitation (normalised as at
    /// registration; only that address, not a look-alike, may use it).
    #[schema(example = "bob@example.com", format = Email, max_length = 254)]
    pub(crate) email: String,
    /// End of validity, RFC 3339 with a time zone, in the future and no later than
    /// 9999-12-31T23:59:59Z (default: in 7 days).
    #[schema(example = "2027-01-01T00:00:00Z", format = DateTime)]
    pub(crate) expires_at: Option<String>,
}

/// `POST /admin/invitations` answer: the token is shown here only.
#[derive(Serialize, ToSchema)]
pub(crate) struct InvitationData {
    /// UUIDv7.
    pub(crate) id: String,
    /// The e-mail address it is for.
    pub(crate) email: String,
    /// End of validity, RFC 3339 UTC.
    pub(crate) expires_at: String,
    /// The invitation (`aigwi_…`): give it to the person, who passes it as `invitation` to
    /// `POST /auth/register`. Single use; never shown again here. With a mailer configured it
    /// is also e-mailed to the address, with a link to the console's registration page.
    pub(crate) invitation: String,
}

impl From<aigw_service::admin::CreatedInvitation> for InvitationData {
    fn from(c: aigw_service::admin::CreatedInvitation) -> Self {
        Self {
            id: c.id,
            email: c.email,
            expires_at: format_timestamp(c.expires_at),
            invitation: c.invitation,
        }
    }
}

impl std::fmt::Debug for InvitationData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvitationData")
            .field("id", &self.id)
            .field("email", &self.email)
            .field("expires_at", &self.expires_at)
            .field("invitation", &"***")
            .finish()
    }
}

/// An invitation to register, with its state.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InvitationDto {
    /// UUIDv7.
    pub(crate) id: String,
    /// The e-mail address it is for.
    pub(crate) email: String,
    /// The admin who created it.
    pub(crate) created_by: String,
    /// RFC 3339 UTC.
    pub(crate) created_at: String,
    /// End of validity, RFC 3339 UTC.
    pub(crate) expires_at: Option<String>,
    /// Where it stands: `pending` (open, never e-mailed: no mailer), `sent` (open, e-mailed),
    /// `accepted` (used to register), `expired` (re-send it to open it again), `revoked`.
    #[schema(value_type = crate::dto::teams::InvitationStatusName)]
    pub(crate) status: String,
    /// When it was last e-mailed, RFC 3339 UTC; null: never (no mailer).
    pub(crate) sent_at: Option<String>,
    /// Times it was e-mailed.
    pub(crate) sends: u32,
    /// When it was used to register, RFC 3339 UTC; null: not yet.
    pub(crate) accepted_at: Option<String>,
    /// When it was revoked, RFC 3339 UTC; null: not revoked.
    pub(crate) revoked_at: Option<String>,
}

impl From<aigw_service::admin::InvitationView> for InvitationDto {
    fn from(i: aigw_service::admin::InvitationView) -> Self {
        Self {
            id: i.id,
            email: i.email,
            created_by: i.created_by,
            created_at: format_timestamp(i.created_at),
            expires_at: i.expires_at.map(format_timestamp),
            status: i.status.as_str().to_owned(),
            sent_at: i.sent_at.map(format_timestamp),
            sends: i.sends,
            accepted_at: i.accepted_at.map(format_timestamp),
            revoked_at: i.revoked_at.map(format_timestamp),
        }
    }
}

/// `GET /admin/invitations` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InvitationListData {
    /// The invitations the `state` filter keeps, newest first.
    pub(crate) invitations: Vec<InvitationDto>,
    /// Cursor of the next page; null on the last.
    pub(crate) next_cursor: Option<String>,
}

impl From<aigw_service::Page<aigw_service::admin::InvitationView>> for InvitationListData {
    fn from(p: aigw_service::Page<aigw_service::admin::InvitationView>) -> Self {
        Self {
            invitations: p.items.into_iter().map(Into::into).collect(),
            next_cursor: p.next_cursor,
        }
    }
}
