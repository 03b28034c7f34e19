//! Accounts people manage themselves: their sessions, their name, their password.
//! Reading needs an access token or a key with `read`; every change needs an access token
//! (table row [`aigw_domain::access::Operation::ManageAccount`]).

use crate::accounts::Accounts;
use crate::audit::Event;
use crate::auth::{Authorized, Principal};
use crate::credential_cache;
use crate::error::ServiceError;
use crate::password::Verification;
use crate::password::LOGIN_FAILED;
use crate::views::{TokenSet, UserView};
use aigw_domain::access::op;
use aigw_domain::{AuditAction, CredentialChangeKind, SessionId, UserId, UserName};
use aigw_persistence::changes::ChangeRow;
use aigw_persistence::models::SessionRow;
use aigw_persistence::{sessions, transaction, users};
use chrono::{DateTime, Utc};

/// Longest session id echoed back in a 404, in characters.
const MAX_ECHOED_ID: usize = 64;

/// One of the caller's live sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    /// The session id (the `sid` claim of its access tokens).
    pub id: String,
    /// Login time, UTC.
    pub created_at: DateTime<Utc>,
    /// Last refresh, UTC; the login time when never refreshed.
    pub last_used_at: DateTime<Utc>,
    /// Absolute end, UTC.
    pub expires_at: DateTime<Utc>,
    /// `User-Agent` of the login (at most 256 characters).
    pub user_agent: Option<String>,
    /// Client address of the login.
    pub ip: Option<String>,
    /// Whether the request was made with this session's access token.
    pub current: bool,
}

impl SessionView {
    fn of(row: SessionRow, current: Option<&str>) -> Self {
        Self {
            current: current == Some(row.id.as_str()),
            last_used_at: row.last_used_at.unwrap_or(row.created_at),
            id: row.id.into_string(),
            created_at: row.created_at,
            expires_at: row.expires_at,
            user_agent: row.user_agent,
            ip: row.ip,
        }
    }
}

/// The user id and session id of a caller the table let change their account (an access
/// token: the table refuses keys, so the second arm is never taken).
fn session_caller(
    principal: &Authorized<op::ManageAccount>,
) -> Result<(UserId, SessionId), ServiceError> {
    match principal.principal() {
        Principal::User { user_id, session_id, .. } => Ok((user_id.clone(), session_id.clone())),
        Principal::ApiKey { .. } => Err(ServiceError::Forbidden {
            required: "access_token".to_owned(),
            current: "api_key".to_owned(),
        }),
    }
}

impl Accounts {
    /// The caller's live sessions, newest first.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn list_sessions(
        &self,
        principal: &Authorized<op::ReadAccount>,
    ) -> Result<Vec<SessionView>, ServiceError> {
        let user_id = principal.user_id().to_owned();
        let current = match principal.principal() {
            Principal::User { session_id, .. } => Some(session_id.clone()),
            Principal::ApiKey { .. } => None,
        };
        let now = self.clock.now();
        let rows =
            self.db.run(move |conn| Ok(sessions::list_live_for_user(conn, &user_id, now)?)).await?;
        Ok(rows.into_iter().map(|row| SessionView::of(row, current.as_deref())).collect())
    }

    /// Ends session `id` of the caller; its access tokens are refused on every node once this
    /// answers (as at logout).
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`session`) when the caller has no live session `id`
    /// (another user's included); [`ServiceError::Unavailable`] when the database is down.
    pub async fn end_session(
        &self,
        principal: &Authorized<op::ManageAccount>,
        id: &str,
    ) -> Result<(), ServiceError> {
        let (user_id, _) = session_caller(principal)?;
        let wanted = SessionId::from(id);
        let now = self.clock.now();
        let event =
            Event::new(AuditAction::SessionEnded, Some(&user_id), Some(&user_id), now).target(id);
        let change = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !sessions::revoke_own_session(conn, &wanted, &user_id, "session_ended", now)?
                    {
                        return Ok(None);
                    }
                    event.insert(conn)?;
                    let kind = CredentialChangeKind::SessionRevoked;
                    credential_cache::append(conn, kind, &wanted, now).map(Some)
                })
            })
            .await?
            .ok_or_else(|| ServiceError::NotFound {
                resource: "session",
                id: id.chars().take(MAX_ECHOED_ID).collect(),
            })?;
        self.cache.publish(vec![change]).await;
        tracing::info!(session_id = %id, "session ended by its user");
        Ok(())
    }

    /// Changes the caller's display name.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `name`;
    /// [`ServiceError::Unauthorized`] when the account no longer exists;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn update_name(
        &self,
        principal: &Authorized<op::ManageAccount>,
        name: &str,
    ) -> Result<UserView, ServiceError> {
        let (user_id, _) = session_caller(principal)?;
        let name = UserName::parse(name, "name")?.into_string();
        let now = self.clock.now();
        let (user, change) = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !users::lock(conn, &user_id)? {
                        return Ok(None);
                    }
                    users::update_name(conn, &user_id, &name, now)?;
                    let user = users::find_by_id(conn, &user_id)?;
                    let kind = CredentialChangeKind::UserChanged;
                    let change = credential_cache::append(conn, kind, &user_id, now)?;
                    Ok::<_, ServiceError>(user.map(|u| (u, change)))
                })
            })
            .await?
            .ok_or_else(|| ServiceError::revoked_credential("the account no longer exists"))?;
        self.cache.publish(vec![change]).await;
        Ok(UserView::from(&user))
    }

    /// Changes the caller's password: checks the current one (the same 401, after the same
    /// work, as a failed login), applies the password policy to the new one, ends every other
    /// session of the user, retires the current session's refresh tokens and answers a fresh
    /// token set for the current session.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] (`invalid e-mail or password`) when `current_password` is wrong; [`ServiceError::Invalid`] on
    /// `current_password` (longer than the policy's maximum) or `new_password` (the policy);
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn change_password(
        &self,
        principal: &Authorized<op::ManageAccount>,
        current_password: String,
        new_password: String,
    ) -> Result<TokenSet, ServiceError> {
        let (user_id, session_id) = session_caller(principal)?;
        self.password_policy
            .check_length_bound(&current_password)
            .map_err(|e| aigw_domain::FieldError::new("current_password", e.issue))?;
        let wanted = user_id.clone();
        let user = self.db.run(move |conn| Ok(users::find_by_id(conn, &wanted)?)).await?;
        let stored_hash = user.as_ref().map(|u| u.password_hash.clone());
        let verification = self.passwords.verify(current_password, stored_hash).await?;
        let Some(user) = user.filter(|_| verification != Verification::Mismatch) else {
            return Err(ServiceError::rejected(LOGIN_FAILED));
        };
        self.password_policy
            .check_new(&new_password)
            .map_err(|e| aigw_domain::FieldError::new("new_password", e.issue))?;
        let hash = self.passwords.hash(new_password).await?;
        let now = self.clock.now();
        let (token, refresh) = Self::first_refresh_token(&session_id, now);
        let event = Event::new(AuditAction::PasswordChanged, Some(&user_id), Some(&user_id), now)
            .target(&user_id);
        let (session, changes) = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !users::lock(conn, &user_id)? {
                        return Err(ServiceError::revoked_credential(
                            "the account no longer exists",
                        ));
                    }
                    let session = sessions::find_session(conn, &session_id)?
                        .filter(|s| s.revoked_at.is_none() && s.expires_at > now)
                        .ok_or_else(|| {
                            ServiceError::revoked_credential("the session has ended; log in again")
                        })?;
                    users::update_password_hash(conn, &user_id, &hash, now)?;
                    let ended = sessions::revoke_user_sessions(
                        conn,
                        &user_id,
                        Some(&session_id),
                        "password_changed",
                        now,
                    )?;
                    sessions::retire_refresh_tokens(conn, &session_id, now)?;
                    sessions::insert_refresh_token(conn, &token)?;
                    let details = serde_json::json!({"ended_sessions": ended});
                    event.clone().details(details).insert(conn)?;
                    // Last statements of the transaction (see `aigw_persistence::changes`).
                    let mut changes: Vec<ChangeRow> = Vec::new();
                    for id in &ended {
                        let kind = CredentialChangeKind::SessionRevoked;
                        changes.push(credential_cache::append(conn, kind, id, now)?);
                    }
                    let kind = CredentialChangeKind::UserChanged;
                    changes.push(credential_cache::append(conn, kind, &user_id, now)?);
                    Ok((session, changes))
                })
            })
            .await?;
        self.cache.publish(changes).await;
        tracing::info!(user_id = %user.id, "password changed");
        self.token_set(&user, &session, &refresh, now)
    }

    /// The caller's own events (those concerning their account), newest first.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `action`, `limit` or `cursor`; [`ServiceError::Unavailable`] when the database is
    /// down.
    pub async fn own_audit_events(
        &self,
        principal: &Authorized<op::ReadAccount>,
        action: Option<String>,
        page: &crate::paging::PageRequest,
    ) -> Result<crate::paging::Page<crate::audit::AuditEventView>, ServiceError> {
        crate::audit::list(&self.db, Some(principal.user_id().to_string()), action, page).await
    }
}
