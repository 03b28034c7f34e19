//! Bodies of the self-service endpoints (`/auth/sessions`, `PATCH /auth/me`,
//! `POST /auth/password`) with their OpenAPI schemas.

use aigw_domain::time::format_timestamp;
use aigw_service::accounts::self_service::SessionView;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One of the caller's live sessions.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionDto {
    /// Session id (the `sid` claim of its access tokens).
    pub(crate) id: String,
    /// Login time, RFC 3339 UTC.
    pub(crate) created_at: String,
    /// Last refresh (the login time when never refreshed), RFC 3339 UTC.
    pub(crate) last_used_at: String,
    /// Absolute end of the session, RFC 3339 UTC.
    pub(crate) expires_at: String,
    /// `User-Agent` of the login, at most 256 characters, or null.
    pub(crate) user_agent: Option<String>,
    /// Client address of the login (through the trusted-proxy rules), or null.
    pub(crate) ip: Option<String>,
    /// True for the session of the access token that made this request.
    pub(crate) current: bool,
}

impl From<SessionView> for SessionDto {
    fn from(s: SessionView) -> Self {
        Self {
            id: s.id,
            created_at: format_timestamp(s.created_at),
            last_used_at: format_timestamp(s.last_used_at),
            expires_at: format_timestamp(s.expires_at),
            user_agent: s.user_agent,
            ip: s.ip,
            current: s.current,
        }
    }
}

/// `GET /auth/sessions` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionListData {
    /// The caller's live sessions, newest first.
    pub(crate) sessions: Vec<SessionDto>,
}

/// `DELETE /auth/sessions/{id}` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EndedSessionData {
    /// The ended session's id.
    pub(crate) id: String,
    /// Always `true`.
    pub(crate) revoked: bool,
}

/// `PATCH /auth/me` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateMeRequest {
    /// Display name, 1 to 100 characters.
    #[schema(example = "Ann", min_length = 1, max_length = 100)]
    pub(crate) name: String,
}

/// `POST /auth/password` body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct ChangePasswordRequest {
    /// The current password.
    #[schema(max_length = 256)]
    pub(crate) current_password: String,
    /// The new password: 8 to 256 Unicode code points (configurable minimum), not a common
    /// password.
    #[schema(min_length = 8, max_length = 256)]
    pub(crate) new_password: String,
}

impl std::fmt::Debug for ChangePasswordRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangePasswordRequest")
            .field("current_password", &"***")
            .field("new_password", &"***")
            .finish()
    }
}

/// An audit event. Never carries a password, token or key.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AuditEventDto {
    /// UUIDv7.
    pub(crate) id: String,
    /// When, RFC 3339 UTC.
    pub(crate) at: String,
    /// Who acted: a user id or an API key id; null when nobody was authenticated (a login,
    /// a refresh) or for the operator's command line.
    pub(crate) actor: Option<String>,
    /// What happened, e.g. `login_succeeded` (docs/api.md lists them).
    pub(crate) action: String,
    /// What was acted on: a user, session or API key id, or null.
    pub(crate) target: Option<String>,
    /// The account the event concerns, or null (a failed login of an unknown e-mail).
    pub(crate) user_id: Option<String>,
    /// Client address, or null.
    pub(crate) ip: Option<String>,
    /// Client `User-Agent` (at most 256 characters), or null.
    pub(crate) user_agent: Option<String>,
    /// The request's `x-request-id`, or null.
    pub(crate) request_id: Option<String>,
    /// Action-specific facts (e-mail, permissions, old and new role, ...).
    #[schema(value_type = Object)]
    pub(crate) details: serde_json::Value,
}

impl From<aigw_service::audit::AuditEventView> for AuditEventDto {
    fn from(e: aigw_service::audit::AuditEventView) -> Self {
        Self {
            id: e.id,
            at: format_timestamp(e.at),
            actor: e.actor,
            action: e.action.into(),
            target: e.target,
            user_id: e.user_id,
            ip: e.ip,
            user_agent: e.user_agent,
            request_id: e.request_id,
            details: e.details,
        }
    }
}

/// `GET /audit` and `GET /admin/audit` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AuditListData {
    /// Events, newest first.
    pub(crate) events: Vec<AuditEventDto>,
    /// Cursor of the next page (pass as `cursor`); null on the last page.
    pub(crate) next_cursor: Option<String>,
}

impl From<aigw_service::Page<aigw_service::audit::AuditEventView>> for AuditListData {
    fn from(p: aigw_service::Page<aigw_service::audit::AuditEventView>) -> Self {
        Self { events: p.items.into_iter().map(Into::into).collect(), next_cursor: p.next_cursor }
    }
}
