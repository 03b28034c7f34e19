//! The audit trail: every security event is a row of `audit_events`, written in the
//! same transaction as the change it records (a failed login, which changes nothing, in one of
//! its own). Rows never carry a secret: no password, token or key, only ids, e-mail addresses,
//! names and permissions.
//!
//! Where a request came from (client address, `User-Agent`, request id) reaches the use cases
//! through a task-local [`AuditContext`] that the HTTP layer sets around each request, so the
//! use cases' signatures do not carry it. Rows are built (context read) on the request's task,
//! before the database closure runs on a blocking thread.

use crate::db::Db;
use crate::error::ServiceError;
use crate::paging::{page_of, Page, PageRequest, Paging};
use aigw_domain::{time, FieldError};
use aigw_domain::{AuditAction, RecordedAction};
use aigw_persistence::audit::{self, AuditEventRow};
use chrono::{DateTime, Utc};
use std::future::Future;
use std::time::Duration;

/// Where the current request came from, for audit rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditContext {
    /// Client address (through the trusted-proxy rules).
    pub ip: Option<String>,
    /// `User-Agent`, at most 256 characters.
    pub user_agent: Option<String>,
    /// The request's `x-request-id`.
    pub request_id: Option<String>,
}

tokio::task_local! {
    static CONTEXT: AuditContext;
}

/// Runs `work` with `context` as the audit context of every event it records.
pub async fn with_context<F: Future>(context: AuditContext, work: F) -> F::Output {
    CONTEXT.scope(context, work).await
}

/// The audit context of the running task (empty outside [`with_context`]), to hand to work
/// it spawns.
pub(crate) fn current_context() -> AuditContext {
    CONTEXT.try_with(Clone::clone).unwrap_or_default()
}

/// Records deleted per pruning statement.
const PRUNE_BATCH: i64 = 2000;

/// An event about to be recorded: built on the request's task (which reads the context),
/// inserted inside the change's transaction with [`Event::insert`].
#[derive(Debug, Clone)]
pub(crate) struct Event(AuditEventRow);

impl Event {
    /// An event `action` concerning account `user_id`, acted by `actor`, at `now`.
    pub(crate) fn new(
        action: AuditAction,
        user_id: Option<&str>,
        actor: Option<&str>,
        now: DateTime<Utc>,
    ) -> Self {
        let context = CONTEXT.try_with(Clone::clone).unwrap_or_default();
        Self(AuditEventRow {
            id: uuid::Uuid::now_v7().to_string(),
            at: now.naive_utc(),
            user_id: user_id.map(str::to_owned),
            actor: actor.map(str::to_owned),
            action: action.into(),
            target: None,
            ip: context.ip,
            user_agent: context.user_agent,
            request_id: context.request_id,
            details: "{}".to_owned(),
        })
    }

    /// The account the event concerns.
    pub(crate) fn user(mut self, user_id: &str) -> Self {
        self.0.user_id = Some(user_id.to_owned());
        self
    }

    /// Another event like this one, under another action (its own id: a change that records
    /// two events, such as a role change and a disabling together, inserts two rows).
    pub(crate) fn action(mut self, action: AuditAction) -> Self {
        self.0.id = uuid::Uuid::now_v7().to_string();
        self.0.action = action.into();
        self
    }

    /// The id of what was acted on.
    pub(crate) fn target(mut self, target: &str) -> Self {
        self.0.target = Some(target.to_owned());
        self
    }

    /// The details (a JSON object; never a secret).
    pub(crate) fn details(mut self, details: serde_json::Value) -> Self {
        self.0.details = details.to_string();
        self
    }

    /// Inserts the event on `conn` (inside the caller's transaction).
    pub(crate) fn insert(
        &self,
        conn: &mut aigw_persistence::DbConnection,
    ) -> Result<(), ServiceError> {
        Ok(audit::insert(conn, &self.0)?)
    }
}

/// Records `event` in a transaction of its own (an event that changes nothing else, such as a
/// failed login). A failure is logged, not returned: the answer does not depend on it.
pub(crate) async fn record_alone(db: &Db, event: Event) {
    let result =
        db.run(move |conn| aigw_persistence::transaction(conn, |conn| event.insert(conn))).await;
    if let Err(e) = result {
        tracing::warn!(error = %e, "could not record an audit event");
    }
}

/// An audit event as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEventView {
    /// UUIDv7.
    pub id: String,
    /// When, UTC.
    pub at: DateTime<Utc>,
    /// Who acted (user id or API key id), if anyone.
    pub actor: Option<String>,
    /// The action (its `snake_case` name as stored; see [`RecordedAction`]).
    pub action: RecordedAction,
    /// What was acted on.
    pub target: Option<String>,
    /// The account the event concerns.
    pub user_id: Option<String>,
    /// Client address.
    pub ip: Option<String>,
    /// Client `User-Agent`.
    pub user_agent: Option<String>,
    /// The request's `x-request-id`.
    pub request_id: Option<String>,
    /// JSON object.
    pub details: serde_json::Value,
}

impl From<&AuditEventRow> for AuditEventView {
    fn from(row: &AuditEventRow) -> Self {
        Self {
            id: row.id.clone(),
            at: row.at.and_utc(),
            actor: row.actor.clone(),
            action: row.action.clone(),
            target: row.target.clone(),
            user_id: row.user_id.clone(),
            ip: row.ip.clone(),
            user_agent: row.user_agent.clone(),
            request_id: row.request_id.clone(),
            details: serde_json::from_str(&row.details).unwrap_or_default(),
        }
    }
}

fn parse_action(action: Option<String>) -> Result<Option<AuditAction>, FieldError> {
    action
        .map(|a| {
            AuditAction::parse(&a)
                .ok_or_else(|| FieldError::new("action", "is not an audit action"))
        })
        .transpose()
}

pub(crate) async fn list(
    db: &Db,
    user_id: Option<String>,
    action: Option<String>,
    page: &PageRequest,
) -> Result<Page<AuditEventView>, ServiceError> {
    let action = parse_action(action)?;
    let Paging { limit, before } = page.parse()?;
    let rows = db
        .run(move |conn| {
            Ok(audit::list(conn, user_id.as_deref(), action, before.as_deref(), limit + 1)?)
        })
        .await?;
    Ok(page_of(rows, limit, |r| &r.id, |r| AuditEventView::from(r)))
}

/// Starts the background pruning of events older than `retention_days` (0: keep for ever):
/// a sweep a minute after start, then every hour, in batches. Stops when the handle is
/// aborted.
pub fn spawn_retention(db: Db, retention_days: u32) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if retention_days == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
        loop {
            match prune(&db, retention_days).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, retention_days, "pruned old audit events"),
                Err(e) => tracing::warn!(error = %e, "pruning audit events failed; retrying later"),
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    })
}

/// Deletes every event older than `retention_days` (in batches); returns how many.
///
/// # Errors
/// [`ServiceError::Unavailable`] when the database is down.
pub async fn prune(db: &Db, retention_days: u32) -> Result<usize, ServiceError> {
    let cutoff = (time::now() - chrono::Duration::days(i64::from(retention_days))).naive_utc();
    let mut total = 0;
    loop {
        let n = db.run(move |conn| Ok(audit::prune_before(conn, cutoff, PRUNE_BATCH)?)).await?;
        total += n;
        if n < usize::try_from(PRUNE_BATCH).unwrap_or(usize::MAX) {
            return Ok(total);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
