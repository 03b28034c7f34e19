//! Sessions and refresh-token rotation (RFC 9700 §4.14.2).
//!
//! Each login starts a session whose refresh tokens form one chain. A refresh retires the
//! presented token and issues its successor in one transaction whose first statement is a
//! compare-and-set, so concurrent refreshes of one token yield exactly one successor. A token
//! presented again after it was rotated is a replay: the whole session is revoked, its newest
//! token included. The session's end is absolute from login; rotation never extends it.

use crate::accounts::Accounts;
use crate::audit::Event;
use crate::auth::{Authorized, Principal};
use crate::credential_cache;
use crate::error::ServiceError;
use crate::metrics::name as metric;
use crate::views::{TokenSet, UserView};
use aigw_domain::access::op;
use aigw_domain::AuditAction;
use aigw_domain::{CredentialChangeKind, RefreshTokenSecret, SessionId, UserId};
use aigw_persistence::changes::ChangeRow;
use aigw_persistence::models::{RefreshTokenRow, SessionRow, UserRow};
use aigw_persistence::{sessions, transaction, users, DbConnection};
use chrono::{DateTime, Duration, Utc};
use rand::rngs::OsRng;

/// What one refresh came to (inside the database closure).
enum Refreshed {
    /// The presented token was rotated now.
    Rotated { user: UserRow, session: SessionRow },
    /// The presented token was rotated moments ago: hand out the same successor again.
    Repeated { user: UserRow, session: SessionRow, sealed: String, successor_hash: String },
    /// Reuse: the session was revoked (the feed row, unless it already was).
    Reused { change: Option<ChangeRow> },
}

const INVALID_REFRESH: &str = "the refresh token is invalid, expired or revoked";

/// Where a login comes from, stored with its session (`GET /auth/sessions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientInfo {
    /// The client address (through the trusted-proxy rules).
    pub ip: Option<String>,
    /// The `User-Agent`, at most [`ClientInfo::MAX_USER_AGENT_CHARS`] characters.
    pub user_agent: Option<String>,
}

impl ClientInfo {
    /// Longest stored `User-Agent`, in characters.
    pub const MAX_USER_AGENT_CHARS: usize = 256;

    /// The client at `ip` with `user_agent` (cut to 256 characters; empty: none).
    pub fn new(ip: Option<String>, user_agent: Option<&str>) -> Self {
        let user_agent = user_agent
            .map(|ua| ua.chars().take(Self::MAX_USER_AGENT_CHARS).collect::<String>())
            .filter(|ua| !ua.is_empty());
        Self { ip, user_agent }
    }
}

/// Which sessions a logout ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogoutScope {
    /// The session of the presented access token (default).
    #[default]
    Local,
    /// Every session of the user.
    Global,
    /// Every session of the user but the current one.
    Others,
}

impl Accounts {
    /// The rows of a new session for `user_id` starting at `now` and its first refresh token.
    pub(crate) fn new_session(
        &self,
        user_id: &str,
        client: &ClientInfo,
        now: DateTime<Utc>,
    ) -> (SessionRow, RefreshTokenRow, RefreshTokenSecret) {
        let ttl = i64::try_from(self.config.refresh_token_ttl_secs).unwrap_or(i64::MAX / 2);
        let expires_at = now + Duration::try_seconds(ttl).unwrap_or(Duration::MAX);
        let session = SessionRow {
            id: SessionId::generate(),
            user_id: UserId::from(user_id),
            created_at: now,
            expires_at,
            revoked_at: None,
            revoked_reason: None,
            user_agent: client.user_agent.clone(),
            ip: client.ip.clone(),
            last_used_at: None,
            amr: Some(aigw_domain::mfa::SessionAmr::Password.as_storage().to_owned()),
        };
        let (token, secret) = Self::first_refresh_token(&session.id, now);
        (session, token, secret)
    }

    /// A new refresh token that starts a chain in session `session_id`.
    pub(crate) fn first_refresh_token(
        session_id: &str,
        now: DateTime<Utc>,
    ) -> (RefreshTokenRow, RefreshTokenSecret) {
        let secret = RefreshTokenSecret::generate(&mut OsRng);
        let token = RefreshTokenRow {
            id: aigw_domain::RefreshTokenId::generate(),
            session_id: SessionId::from(session_id),
            token_hash: secret.digest().into_string(),
            parent_id: None,
            created_at: now,
            rotated_at: None,
            successor_sealed: None,
        };
        (token, secret)
    }

    /// Stores a new session and its first refresh token on `conn` (inside the caller's
    /// transaction).
    pub(crate) fn store_session(
        conn: &mut DbConnection,
        session: &SessionRow,
        token: &RefreshTokenRow,
    ) -> Result<(), ServiceError> {
        sessions::insert_session(conn, session)?;
        sessions::insert_refresh_token(conn, token)?;
        Ok(())
    }

    /// Builds the token set for `user` in `session_id` with refresh token `refresh`.
    pub(crate) fn token_set(
        &self,
        user: &UserRow,
        session: &SessionRow,
        refresh: &RefreshTokenSecret,
        now: DateTime<Utc>,
    ) -> Result<TokenSet, ServiceError> {
        let session_id = session.id.clone();
        let amr = aigw_domain::mfa::SessionAmr::from_storage(session.amr.as_deref());
        let access = self.tokens.issue_with_amr(
            &user.id,
            &session_id,
            user.role.as_str(),
            Some(amr.values()),
            now,
            session.expires_at,
        )?;
        Ok(TokenSet {
            user: UserView::from(user),
            access_token: access.token,
            expires_at: access.expires_at,
            expires_in: access.expires_in,
            refresh_token: refresh.expose().to_owned(),
            session_id,
        })
    }

    /// Exchanges a refresh token for a new token set, retiring the presented token.
    ///
    /// The immediate parent of the newest token, presented again within
    /// `auth.refresh_reuse_grace_secs` of its rotation, gets the same successor back (a client
    /// that retried, or two tabs racing), never a second branch. Any other reuse revokes the
    /// whole session (RFC 9700 §4.14.2).
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] when the token is malformed, unknown, reused outside the
    /// grace window (which also revokes its session), or its session is revoked or past its
    /// absolute end; [`ServiceError::Unavailable`] when the database is down.
    pub async fn refresh(&self, presented: &str) -> Result<TokenSet, ServiceError> {
        let invalid = || ServiceError::rejected(INVALID_REFRESH);
        let Some(presented) = RefreshTokenSecret::parse(presented) else {
            self.metrics.count(metric::REFRESH_TOTAL, &[("outcome", "invalid")]);
            return Err(invalid());
        };
        let digest = presented.digest().into_string();
        let presented_digest = digest.clone(); // the sealed successor's associated data
        let successor = RefreshTokenSecret::generate(&mut OsRng);
        let successor_hash = successor.digest().into_string();
        let grace_secs =
            i64::try_from(self.config.refresh_reuse_grace_secs).unwrap_or(i64::MAX / 4);
        // Sealed with the presented token's digest as associated data (see `seal`).
        let sealed =
            if grace_secs > 0 { self.sealer.seal(&digest, successor.expose()) } else { None };
        let now = self.clock.now();
        let outcome = self.rotate(digest, sealed, successor_hash, grace_secs, now).await;
        let label = match &outcome {
            Ok(Refreshed::Rotated { .. }) => "rotated",
            Ok(Refreshed::Repeated { .. }) => "replayed",
            Ok(Refreshed::Reused { change: Some(_) }) => "reused",
            Ok(Refreshed::Reused { change: None }) => "invalid",
            Err(ServiceError::Unauthorized { .. }) => "invalid",
            Err(_) => "error",
        };
        self.metrics.count(metric::REFRESH_TOTAL, &[("outcome", label)]);
        match outcome? {
            Refreshed::Rotated { user, session } => {
                self.token_set(&user, &session, &successor, now)
            }
            Refreshed::Repeated { user, session, sealed, successor_hash } => {
                let same = self
                    .sealer
                    .open(&presented_digest, &sealed)
                    .map(RefreshTokenSecret::from_trusted)
                    .filter(|t| t.digest().as_str() == successor_hash)
                    .ok_or_else(invalid)?;
                self.token_set(&user, &session, &same, now)
            }
            Refreshed::Reused { change } => {
                self.cache.publish(change.into_iter().collect()).await;
                Err(invalid())
            }
        }
    }

    /// The database part of [`Accounts::refresh`]: rotates the token with `digest`, or
    /// tells a grace-window repeat or a reuse (revoking the session) apart.
    async fn rotate(
        &self,
        digest: String,
        sealed: Option<String>,
        successor_hash: String,
        grace_secs: i64,
        now: DateTime<Utc>,
    ) -> Result<Refreshed, ServiceError> {
        let reuse_event = Event::new(AuditAction::RefreshReuseDetected, None, None, now);
        self.db
            .run(move |conn| {
                // One indexed read first: an unknown token (a guess) never opens a write
                // transaction, nor takes SQLite's write lock.
                if sessions::find_refresh_token(conn, &digest)?.is_none() {
                    return Err(ServiceError::rejected(INVALID_REFRESH));
                }
                let successor = (sealed.as_deref(), successor_hash.as_str());
                if let Some((user, session)) = claim_and_rotate(conn, &digest, successor, now)? {
                    return Ok(Refreshed::Rotated { user, session });
                }
                repeat_or_revoke(conn, &digest, grace_secs, &reuse_event, now)
            })
            .await
    }

    /// Ends sessions of the caller: the current one, all, or all others. Returns how many
    /// sessions were revoked. A `refresh_token` of the caller's, if given, also ends the
    /// session it belongs to (a client logging out a session whose access token it lost);
    /// a token of anyone else is ignored, so the call is no oracle.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn logout(
        &self,
        principal: &Authorized<op::Logout>,
        scope: LogoutScope,
        refresh_token: Option<&str>,
    ) -> Result<usize, ServiceError> {
        // The table's row `Logout` refuses API keys: a checked caller holds a session.
        let Principal::User { user_id, session_id, .. } = principal.principal() else {
            return Err(ServiceError::Internal("logout without a session".to_owned()));
        };
        let (user_id, session_id) = (user_id.clone(), session_id.clone());
        let extra_digest =
            refresh_token.and_then(RefreshTokenSecret::parse).map(|t| t.digest().into_string());
        let now = self.clock.now();
        let scope_name = match scope {
            LogoutScope::Local => "local",
            LogoutScope::Global => "global",
            LogoutScope::Others => "others",
        };
        let event = Event::new(AuditAction::LoggedOut, Some(&user_id), Some(&user_id), now)
            .target(&session_id);
        let changes: Vec<ChangeRow> = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    let mut revoked = match scope {
                        LogoutScope::Local => {
                            if sessions::revoke_session(conn, &session_id, "logout", now)? {
                                vec![session_id.to_string()]
                            } else {
                                Vec::new()
                            }
                        }
                        LogoutScope::Global => sessions::revoke_user_sessions(
                            conn,
                            &user_id,
                            None,
                            "logout_global",
                            now,
                        )?,
                        LogoutScope::Others => sessions::revoke_user_sessions(
                            conn,
                            &user_id,
                            Some(&session_id),
                            "logout_others",
                            now,
                        )?,
                    };
                    if let Some(digest) = &extra_digest {
                        if let Some((_, session)) = sessions::find_refresh_token(conn, digest)? {
                            if session.user_id == user_id
                                && session.id != session_id
                                && sessions::revoke_session(conn, &session.id, "logout", now)?
                            {
                                revoked.push(session.id.into_string());
                            }
                        }
                    }
                    let details =
                        serde_json::json!({"scope": scope_name, "ended_sessions": revoked});
                    event.clone().details(details).insert(conn)?;
                    // Last statements of the transaction (see `aigw_persistence::changes`).
                    let kind = CredentialChangeKind::SessionRevoked;
                    revoked.iter().map(|id| credential_cache::append(conn, kind, id, now)).collect()
                })
            })
            .await?;
        let count = changes.len();
        self.cache.publish(changes).await;
        Ok(count)
    }
}

/// Rotates refresh token `digest` in one transaction: claims it by compare-and-set (sealing
/// the successor's secret into it when `successor.0` is given, for the grace window), checks
/// its session and user, and stores the successor (digest `successor.1`). `None` when another
/// request claimed it first (a repeat or a reuse: [`repeat_or_revoke`] tells which).
///
/// # Errors
/// [`ServiceError::Unauthorized`] (a rejected refresh) when the session has ended or the user is disabled (the claim
/// rolls back: nothing changes); on database failure.
fn claim_and_rotate(
    conn: &mut DbConnection,
    digest: &str,
    (sealed, successor_hash): (Option<&str>, &str),
    now: DateTime<Utc>,
) -> Result<Option<(UserRow, SessionRow)>, ServiceError> {
    let invalid = || ServiceError::rejected(INVALID_REFRESH);
    transaction(conn, |conn| {
        // First statement: the compare-and-set (takes SQLite's write lock at once).
        if !sessions::claim_for_rotation(conn, digest, now, sealed)? {
            return Ok(None);
        }
        let (token, session) = sessions::find_refresh_token(conn, digest)?.ok_or_else(invalid)?;
        if session.revoked_at.is_some() || session.expires_at <= now {
            return Err(invalid()); // rolls the claim back; nothing changes
        }
        let user = users::find_by_id(conn, &session.user_id)?
            .filter(|u| u.disabled_at.is_none())
            .ok_or_else(invalid)?;
        if let Some(parent) = &token.parent_id {
            // The parent's grace ends once its successor (this token) is used.
            sessions::clear_sealed(conn, parent)?;
        }
        sessions::touch(conn, &session.id, now)?;
        sessions::insert_refresh_token(
            conn,
            &RefreshTokenRow {
                id: aigw_domain::RefreshTokenId::generate(),
                session_id: session.id.clone(),
                token_hash: successor_hash.to_owned(),
                parent_id: Some(token.id),
                created_at: now,
                rotated_at: None,
                successor_sealed: None,
            },
        )?;
        Ok(Some((user, session)))
    })
}

/// A refresh token `digest` that was already rotated: a repeat within `grace_secs` of its
/// rotation whose successor is still unused answers that successor again; any other use is a
/// reuse, and revokes the session (recording `reuse_event` and a feed row).
///
/// # Errors
/// [`ServiceError::Unauthorized`] (a rejected refresh) for an unknown token or an ended session; on database failure.
fn repeat_or_revoke(
    conn: &mut DbConnection,
    digest: &str,
    grace_secs: i64,
    reuse_event: &Event,
    now: DateTime<Utc>,
) -> Result<Refreshed, ServiceError> {
    let invalid = || ServiceError::rejected(INVALID_REFRESH);
    let Some((token, session)) = sessions::find_refresh_token(conn, digest)? else {
        return Err(invalid()); // unknown token
    };
    if session.revoked_at.is_some() || session.expires_at <= now {
        return Err(invalid());
    }
    let within_grace = token
        .rotated_at
        .is_some_and(|at| (now - at).num_milliseconds() <= grace_secs.saturating_mul(1000));
    if let (true, Some(sealed)) = (within_grace, token.successor_sealed) {
        if let Some(child) = sessions::find_successor(conn, &token.id)? {
            if child.rotated_at.is_none() {
                let user = users::find_by_id(conn, &session.user_id)?.ok_or_else(invalid)?;
                let successor_hash = child.token_hash;
                return Ok(Refreshed::Repeated { user, session, sealed, successor_hash });
            }
        }
    }
    // Reuse outside the grace window, or of an older ancestor: revoke the family.
    let change = transaction(conn, |conn| {
        if !sessions::revoke_session(conn, &session.id, "refresh_token_reuse", now)? {
            return Ok(None);
        }
        reuse_event
            .clone()
            .user(&session.user_id)
            .target(&session.id)
            .details(serde_json::json!({"session_revoked": true}))
            .insert(conn)?;
        let kind = CredentialChangeKind::SessionRevoked;
        credential_cache::append(conn, kind, &session.id, now).map(Some)
    })?;
    if change.is_some() {
        // A security event: at info, with its fields (docs/operations.md).
        tracing::info!(
            event = "refresh_token_reuse",
            session_id = %session.id,
            user_id = %session.user_id,
            "refresh token reused; session revoked"
        );
    }
    Ok(Refreshed::Reused { change })
}
