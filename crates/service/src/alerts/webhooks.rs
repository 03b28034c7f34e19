//! A team's webhook: its owners and admins (and platform admins) set it (a new signing secret
//! each time, shown once), read it, remove it, and list its deliveries with their status.

use super::signature::new_secret;
use super::webhook_url::check;
use super::BudgetAlerts;
use crate::audit::Event;
use crate::auth::Authorized;
use crate::error::ServiceError;
use crate::paging::{page_of, Page, PageRequest};
use crate::team_access::{is_platform_admin, TeamAccess};
use aigw_domain::access::op;
use aigw_domain::{AuditAction, TeamId};
use aigw_persistence::webhooks::{self, DeliveryRow, TeamWebhookRow};
use aigw_persistence::{transaction, DbConnection};
use chrono::{DateTime, Utc};

/// A team's webhook as shown (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookView {
    /// The team.
    pub team_id: String,
    /// Where budget alerts are POSTed.
    pub url: String,
    /// Who set it last.
    pub created_by: String,
    /// When it was first set, UTC.
    pub created_at: DateTime<Utc>,
    /// When it was last set (and its secret made), UTC.
    pub updated_at: DateTime<Utc>,
}

impl From<TeamWebhookRow> for WebhookView {
    fn from(r: TeamWebhookRow) -> Self {
        Self {
            team_id: r.team_id.into_string(),
            url: r.url,
            created_by: r.created_by,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// A webhook just set, with its signing secret (`whsec_…`): shown in this answer only.
#[derive(Clone)]
pub struct CreatedWebhook {
    /// The webhook.
    pub webhook: WebhookView,
    /// The signing secret.
    pub secret: String,
}

impl std::fmt::Debug for CreatedWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedWebhook")
            .field("webhook", &self.webhook)
            .field("secret", &"***")
            .finish()
    }
}

/// A delivery as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryView {
    /// UUIDv7; the `webhook-id` header.
    pub id: String,
    /// The event type.
    pub event: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    /// Attempts made.
    pub attempts: u32,
    /// When the next attempt is due (pending only), UTC.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The HTTP status of the last attempt, if the receiver answered.
    pub last_status: Option<u16>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When it was made, UTC.
    pub created_at: DateTime<Utc>,
    /// When the receiver took it, UTC.
    pub delivered_at: Option<DateTime<Utc>>,
    /// The body sent.
    pub payload: serde_json::Value,
}

impl From<&DeliveryRow> for DeliveryView {
    fn from(r: &DeliveryRow) -> Self {
        Self {
            id: r.id.clone(),
            event: r.event.clone(),
            status: r.status.clone(),
            attempts: u32::try_from(r.attempts).unwrap_or(0),
            next_attempt_at: (r.status == webhooks::PENDING).then_some(r.next_attempt_at),
            last_status: r.last_status.and_then(|s| u16::try_from(s).ok()),
            last_error: r.last_error.clone(),
            created_at: r.created_at,
            delivered_at: r.delivered_at,
            payload: serde_json::from_str(&r.payload).unwrap_or(serde_json::Value::Null),
        }
    }
}

/// 404 for team `team_id`'s webhook, which it does not have.
fn no_webhook(team_id: &str) -> ServiceError {
    ServiceError::NotFound { resource: "webhook", id: team_id.chars().take(64).collect() }
}

/// Requires `user_id` to manage team `team_id` (`admin`: a platform admin), on `conn`; in a
/// transaction that writes, after [`lock_team`].
fn manages(
    conn: &mut DbConnection,
    team_id: &TeamId,
    user_id: &aigw_domain::UserId,
    admin: bool,
) -> Result<(), ServiceError> {
    TeamAccess::of(conn, team_id, user_id, admin)?.1.manage().map(|_| ())
}

/// Locks team `team_id`'s row as a transaction's first statement, so that SQLite takes its
/// write lock up front (see `aigw_persistence::transaction`).
fn lock_team(conn: &mut DbConnection, team_id: &TeamId) -> Result<(), ServiceError> {
    if aigw_persistence::teams::lock(conn, team_id)? {
        Ok(())
    } else {
        Err(crate::team_access::team_not_found(team_id))
    }
}

impl BudgetAlerts {
    /// Sets team `team_id`'s webhook to `url` with a new signing secret (replacing any, whose
    /// secret then stops signing); its owners and admins, platform admins.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `url` (not `https://`, a user or password in it, a literal
    /// address that is not public: [`super::webhook_url::check`]); [`ServiceError::NotFound`]
    /// (`team`) for a non-member; [`ServiceError::Forbidden`] (`team_admin`) for a member.
    pub async fn set_team_webhook(
        &self,
        principal: &Authorized<op::ManageAccount>,
        team_id: &TeamId,
        url: &str,
    ) -> Result<CreatedWebhook, ServiceError> {
        let url = check(url.trim(), self.config.webhook_allow_private)?;
        let admin = is_platform_admin(&self.cache, principal).await?;
        let secret = new_secret();
        let sealed = self
            .sealer
            .seal(team_id, &secret)
            .ok_or_else(|| ServiceError::Internal("sealing a webhook secret".to_owned()))?;
        let now = self.clock.now();
        let user_id = principal.user_id().to_owned();
        let row = TeamWebhookRow {
            team_id: team_id.clone(),
            url: url.to_string(),
            secret_sealed: sealed,
            created_by: user_id.to_string(),
            created_at: now,
            updated_at: now,
        };
        let event = Event::new(
            AuditAction::TeamWebhookSet,
            Some(&user_id),
            Some(principal.actor()),
            now,
        )
        .target(team_id)
        .details(
            serde_json::json!({"team_id": team_id, "origin": url.origin().ascii_serialization()}),
        );
        let team = team_id.to_owned();
        let stored = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    lock_team(conn, &team)?;
                    manages(conn, &team, &user_id, admin)?;
                    webhooks::set(conn, &row)?;
                    event.insert(conn)?;
                    webhooks::find(conn, &row.team_id)?.ok_or_else(|| no_webhook(&row.team_id))
                })
            })
            .await?;
        Ok(CreatedWebhook { webhook: stored.into(), secret })
    }

    /// Team `team_id`'s webhook (its owners and admins, platform admins).
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`team`, or `webhook` when it has none);
    /// [`ServiceError::Forbidden`] (`team_admin`) for a member.
    pub async fn team_webhook(
        &self,
        principal: &Authorized<op::ReadAccount>,
        team_id: &TeamId,
    ) -> Result<WebhookView, ServiceError> {
        let admin = is_platform_admin(&self.cache, principal).await?;
        let (team, user_id) = (team_id.to_owned(), principal.user_id().to_owned());
        self.db
            .run(move |conn| {
                manages(conn, &team, &user_id, admin)?;
                webhooks::find(conn, &team)?.map(WebhookView::from).ok_or_else(|| no_webhook(&team))
            })
            .await
    }

    /// Removes team `team_id`'s webhook; its deliveries not yet made are dropped (its owners
    /// and admins, platform admins).
    ///
    /// # Errors
    /// As [`Self::team_webhook`].
    pub async fn delete_team_webhook(
        &self,
        principal: &Authorized<op::ManageAccount>,
        team_id: &TeamId,
    ) -> Result<(), ServiceError> {
        let admin = is_platform_admin(&self.cache, principal).await?;
        let now = self.clock.now();
        let user_id = principal.user_id().to_owned();
        let event = Event::new(
            AuditAction::TeamWebhookRemoved,
            Some(&user_id),
            Some(principal.actor()),
            now,
        )
        .target(team_id)
        .details(serde_json::json!({"team_id": team_id}));
        let team = team_id.to_owned();
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    lock_team(conn, &team)?;
                    manages(conn, &team, &user_id, admin)?;
                    if !webhooks::delete(conn, &team)? {
                        return Err(no_webhook(&team));
                    }
                    event.insert(conn)
                })
            })
            .await
    }

    /// Team `team_id`'s webhook deliveries, newest first, a page at a time (its owners and
    /// admins, platform admins); those of a removed webhook stay listed.
    ///
    /// # Errors
    /// As [`Self::team_webhook`] but for `webhook`; [`ServiceError::Invalid`] on `limit` or
    /// `cursor`.
    pub async fn list_webhook_deliveries(
        &self,
        principal: &Authorized<op::ReadAccount>,
        team_id: &TeamId,
        page: &PageRequest,
    ) -> Result<Page<DeliveryView>, ServiceError> {
        let paging = page.parse()?;
        let admin = is_platform_admin(&self.cache, principal).await?;
        let (team, user_id) = (team_id.to_owned(), principal.user_id().to_owned());
        let rows = self
            .db
            .run(move |conn| {
                manages(conn, &team, &user_id, admin)?;
                Ok(webhooks::list(conn, &team, paging.before.as_deref(), paging.limit + 1)?)
            })
            .await?;
        Ok(page_of(rows, paging.limit, |r| &r.id, |r| DeliveryView::from(r)))
    }
}
