//! Invitations to register (`auth.registration = "invite"`): an administrator creates one for
//! an address (e-mailed with its link when a mailer is configured), lists them with their
//! state, sends one again (a new token, a new end of validity) or revokes it; and what the
//! operator's commands do with them (`aigw admin list-invitations`, `revoke-invitation`).
//!
//! Times come from the service's clock ([`crate::Clock`]), so an expiry can be tested
//! without waiting.

use crate::admin::caller::Admin;
use crate::admin::Administration;
use crate::audit::Event;
use crate::error::ServiceError;
use crate::paging::{page_of, Page, PageRequest};
use aigw_domain::invitation::{InvitationSecret, InvitationStatus};
use aigw_domain::{time, AuditAction, InvitationId, TeamInvitationId, UserId};
use aigw_persistence::invitations::{self, InvitationRow};
use aigw_persistence::{transaction, users};
use chrono::{DateTime, Utc};

/// A new invitation, or one sent again: shown once with its token.
#[derive(Clone)]
pub struct CreatedInvitation {
    /// UUIDv7.
    pub id: String,
    /// The e-mail address it is for (normalised).
    pub email: String,
    /// End of validity, UTC.
    pub expires_at: DateTime<Utc>,
    /// The token (`aigwi_…`), never shown again.
    pub invitation: String,
}

impl std::fmt::Debug for CreatedInvitation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedInvitation")
            .field("id", &self.id)
            .field("email", &self.email)
            .field("expires_at", &self.expires_at)
            .field("invitation", &"***")
            .finish()
    }
}

/// Validity of an invitation when the request gives no `expires_at`, and of one sent again,
/// in days.
pub const DEFAULT_INVITATION_DAYS: i64 = 7;

/// An invitation as listed: to register (`team_id` `None`) or to join a team (the
/// operator's list holds both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvitationView {
    /// UUIDv7 string.
    pub id: String,
    /// The invited address, normalised.
    pub email: String,
    /// The team it joins, for a team invitation.
    pub team_id: Option<String>,
    /// Who created it.
    pub created_by: String,
    /// When, UTC.
    pub created_at: DateTime<Utc>,
    /// End of validity, UTC (`None`: a team invitation made before invitations expired).
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was last e-mailed, UTC (`None`: never, no mailer).
    pub sent_at: Option<DateTime<Utc>>,
    /// Times it was e-mailed.
    pub sends: u32,
    /// When it was used, UTC.
    pub accepted_at: Option<DateTime<Utc>>,
    /// When it was revoked, UTC.
    pub revoked_at: Option<DateTime<Utc>>,
    /// Where it stands.
    pub status: InvitationStatus,
}

impl InvitationView {
    /// An invitation to register as it stands at `now`.
    fn of(row: InvitationRow, now: DateTime<Utc>) -> Self {
        let expires_at = row.expires_at.and_utc();
        Self {
            status: InvitationStatus::of(
                row.revoked_at.is_some(),
                row.used_at.is_some(),
                expires_at <= now,
                row.sent_at.is_some(),
            ),
            id: row.id.into_string(),
            email: row.email,
            team_id: None,
            created_by: row.created_by,
            created_at: row.created_at.and_utc(),
            expires_at: Some(expires_at),
            sent_at: row.sent_at.map(|t| t.and_utc()),
            sends: u32::try_from(row.sends).unwrap_or(0),
            accepted_at: row.used_at.map(|t| t.and_utc()),
            revoked_at: row.revoked_at.map(|t| t.and_utc()),
        }
    }
}

/// Which invitations to register a list holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InvitationFilter {
    /// Unused, unrevoked and unexpired: those that can still be used.
    #[default]
    Open,
    /// Every one, whatever its state.
    All,
}

impl InvitationFilter {
    /// The filter named `raw` (`open`, `all`).
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `state` for any other name.
    pub fn parse(raw: &str) -> Result<Self, ServiceError> {
        match raw {
            "open" => Ok(Self::Open),
            "all" => Ok(Self::All),
            _ => Err(aigw_domain::FieldError::new("state", "must be open or all").into()),
        }
    }
}

impl Administration {
    /// Creates a single-use invitation to register with `email`, valid until `expires_at`
    /// (RFC 3339, in the future; default [`DEFAULT_INVITATION_DAYS`] days), and e-mails it
    /// when a mailer is configured.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `email` or `expires_at`; [`ServiceError::Unavailable`]
    /// when the database is down.
    pub async fn admin_create_invitation(
        &self,
        admin: &Admin,
        email: &str,
        expires_at: Option<&str>,
    ) -> Result<CreatedInvitation, ServiceError> {
        let email = aigw_domain::Email::parse(email)?;
        let now = self.clock.now();
        let expires_at = match expires_at {
            Some(raw) => crate::api_keys::manage::parse_future_timestamp(raw, now)?,
            None => now + chrono::Duration::days(DEFAULT_INVITATION_DAYS),
        };
        let secret = InvitationSecret::generate(&mut rand::rngs::OsRng);
        let sent = self.accounts.email.can_send();
        let row = InvitationRow {
            id: aigw_domain::InvitationId::generate(),
            email: email.as_str().to_owned(),
            token_hash: secret.digest().into_string(),
            created_by: admin.user_id().to_owned(),
            created_at: now.naive_utc(),
            expires_at: expires_at.naive_utc(),
            used_at: None,
            revoked_at: None,
            sent_at: sent.then_some(now.naive_utc()),
            sends: i32::from(sent),
        };
        let event = Event::new(AuditAction::InvitationCreated, None, Some(admin.actor()), now)
            .target(&row.id)
            .details(serde_json::json!({
                "email": row.email,
                "expires_at": time::format_timestamp(expires_at),
            }));
        let stored = row.clone();
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    invitations::insert(conn, &stored)?;
                    event.insert(conn)
                })
            })
            .await?;
        tracing::info!(invitation_id = %row.id, by = %admin.user_id(), "invitation created");
        self.mail_invitation(admin, &row.email, secret.expose(), expires_at).await;
        Ok(CreatedInvitation {
            id: row.id.into_string(),
            email: row.email,
            expires_at,
            invitation: secret.expose().to_owned(),
        })
    }

    /// Sends invitation `id` again: a new token (the old link stops working), valid for
    /// [`DEFAULT_INVITATION_DAYS`] days from now, e-mailed when a mailer is configured. An
    /// expired invitation opens again this way.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`invitation`) when no invitation to register has that id,
    /// or it was used or revoked; [`ServiceError::Unavailable`] when the database is down.
    pub async fn admin_resend_invitation(
        &self,
        admin: &Admin,
        id: &str,
    ) -> Result<CreatedInvitation, ServiceError> {
        let now = self.clock.now();
        let expires_at = now + chrono::Duration::days(DEFAULT_INVITATION_DAYS);
        let secret = InvitationSecret::generate(&mut rand::rngs::OsRng);
        let sent = self.accounts.email.can_send().then_some(now.naive_utc());
        let digest = secret.digest().into_string();
        let event = Event::new(AuditAction::InvitationResent, None, Some(admin.actor()), now)
            .target(id)
            .details(serde_json::json!({
                "expires_at": time::format_timestamp(expires_at),
                "sent": sent.is_some(),
            }));
        let target = InvitationId::from(id);
        let renewed = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    // First statement: the write (SQLite's write lock at once).
                    let renewed =
                        invitations::renew(conn, &target, &digest, expires_at.naive_utc(), sent)?;
                    let Some(row) = renewed else {
                        return Err(invitation_not_found(&target));
                    };
                    event.insert(conn)?;
                    Ok(row)
                })
            })
            .await?;
        tracing::info!(invitation_id = %renewed.id, by = %admin.user_id(), "invitation sent again");
        self.mail_invitation(admin, &renewed.email, secret.expose(), expires_at).await;
        Ok(CreatedInvitation {
            id: renewed.id.into_string(),
            email: renewed.email,
            expires_at,
            invitation: secret.expose().to_owned(),
        })
    }

    /// E-mails an invitation to register to `email` (when a mailer is configured): who
    /// invited, the link of the console's registration page carrying `code`, and the code.
    async fn mail_invitation(&self, admin: &Admin, email: &str, code: &str, until: DateTime<Utc>) {
        let mail = &self.accounts.email;
        if !mail.can_send() {
            return;
        }
        let by = UserId::from(admin.user_id());
        let inviter = match self.db.run(move |conn| Ok(users::find_by_id(conn, &by)?)).await {
            Ok(Some(user)) => format!("{} ({})", user.name, user.email),
            _ => "An administrator".to_owned(),
        };
        let values = serde_json::json!({
            "inviter": inviter,
            "link": mail.page_link(&format!("/register?invitation={code}")),
            "token": code,
            "until": time::format_timestamp(until),
        });
        mail.send_mail(crate::email::MailKind::RegistrationInvitation, email, values);
    }

    /// The invitations to register that `filter` keeps, newest first, a page at a time, each
    /// with its state now.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `limit` or `cursor`; [`ServiceError::Unavailable`] when
    /// the database is down.
    pub async fn admin_list_invitations(
        &self,
        _admin: &Admin,
        filter: InvitationFilter,
        page: &PageRequest,
    ) -> Result<Page<InvitationView>, ServiceError> {
        let paging = page.parse()?;
        let (limit, now) = (paging.limit, self.clock.now());
        let rows = self
            .db
            .run(move |conn| {
                let before = paging.before.as_deref();
                Ok(match filter {
                    InvitationFilter::Open => {
                        invitations::list_open(conn, now.naive_utc(), before, limit + 1)?
                    }
                    InvitationFilter::All => invitations::list_all(conn, before, limit + 1)?,
                })
            })
            .await?;
        Ok(page_of(rows, limit, |r| &r.id, |r| InvitationView::of(r.clone(), now)))
    }

    /// Revokes open invitation `id` to register. It can no longer be used.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`invitation`) when no open invitation has that id.
    pub async fn admin_revoke_invitation(
        &self,
        admin: &Admin,
        id: &str,
    ) -> Result<(), ServiceError> {
        self.revoke_any_invitation(id, admin.actor(), false).await
    }

    /// Revokes open invitation `id` to register, or to join a team when `any_team`.
    async fn revoke_any_invitation(
        &self,
        id: &str,
        actor: &str,
        any_team: bool,
    ) -> Result<(), ServiceError> {
        let now = self.clock.now();
        // The id of an invitation to register, or (`any_team`) of one to join a team.
        let (target, team_target) = (InvitationId::from(id), TeamInvitationId::from(id));
        let event = Event::new(AuditAction::InvitationRevoked, None, Some(actor), now).target(id);
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    let team = if invitations::revoke(conn, &target, now.naive_utc())? {
                        None
                    } else if any_team {
                        match aigw_persistence::teams::revoke_invitation(
                            conn,
                            None,
                            &team_target,
                            now,
                        )? {
                            Some(team) => Some(team),
                            None => return Err(invitation_not_found(&target)),
                        }
                    } else {
                        return Err(invitation_not_found(&target));
                    };
                    event.clone().details(serde_json::json!({"team_id": team})).insert(conn)
                })
            })
            .await
    }
}

fn invitation_not_found(id: &str) -> ServiceError {
    ServiceError::NotFound { resource: "invitation", id: id.chars().take(64).collect() }
}

/// The operator's commands (`aigw admin …`), with no server and no caller.
impl Administration {
    /// Every open invitation, to register and to join a team (the operator's
    /// `aigw admin list-invitations`), newest first: at most `limit` of each kind.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn list_open_invitations(
        &self,
        limit: i64,
    ) -> Result<Vec<InvitationView>, ServiceError> {
        let now = self.clock.now();
        let (platform, teams) = self
            .db
            .run(move |conn| {
                let platform = invitations::list_open(conn, now.naive_utc(), None, limit)?;
                let teams = aigw_persistence::teams::list_invitations(conn, None, None, limit)?;
                Ok((platform, teams))
            })
            .await?;
        let teams = teams.into_iter().map(|r| {
            let team = crate::teams::TeamInvitationView::at(r, now);
            InvitationView {
                id: team.id,
                email: team.email,
                team_id: Some(team.team_id),
                created_by: team.created_by,
                created_at: team.created_at,
                expires_at: team.expires_at,
                sent_at: team.sent_at,
                sends: team.sends,
                accepted_at: team.accepted_at,
                revoked_at: team.revoked_at,
                status: team.status,
            }
        });
        let mut all: Vec<InvitationView> =
            platform.into_iter().map(|r| InvitationView::of(r, now)).chain(teams).collect();
        all.sort_by(|a, b| b.id.cmp(&a.id));
        Ok(all)
    }

    /// Revokes open invitation `id`, to register or to join a team (the operator's
    /// `aigw admin revoke-invitation`).
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`invitation`) when no open invitation has that id.
    pub async fn revoke_invitation(&self, id: &str) -> Result<(), ServiceError> {
        self.revoke_any_invitation(id, "operator", true).await
    }
}
