//! Repositories of `team_webhooks` (a team's webhook: its URL and sealed signing secret) and
//! `webhook_deliveries` (each event to send, tried until delivered or given up). A node claims
//! a due delivery with a conditional update of its `locked_until`, so that two nodes never
//! send the same attempt.

use crate::error::PersistenceError;
use crate::models::{from_utc, to_utc};
use crate::pool::DbConnection;
use crate::schema::{team_webhooks as w, webhook_deliveries as d};
use aigw_domain::TeamId;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

/// A team's webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamWebhookRow {
    /// The team.
    pub team_id: TeamId,
    /// Where events are POSTed (`https://…`, or `http://…` where allowed).
    pub url: String,
    /// The signing secret, sealed with the server's key (`crate`'s callers seal and open it).
    pub secret_sealed: String,
    /// Who set it.
    pub created_by: String,
    /// When it was first set, UTC.
    pub created_at: DateTime<Utc>,
    /// When it was last set, UTC.
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = w)]
struct WebhookRecord {
    team_id: String,
    url: String,
    secret_sealed: String,
    created_by: String,
    created_at: NaiveDateTime,
    updated_at: NaiveDateTime,
}

impl From<WebhookRecord> for TeamWebhookRow {
    fn from(r: WebhookRecord) -> Self {
        Self {
            team_id: r.team_id.into(),
            url: r.url,
            secret_sealed: r.secret_sealed,
            created_by: r.created_by,
            created_at: to_utc(r.created_at),
            updated_at: to_utc(r.updated_at),
        }
    }
}

/// Sets team `row.team_id`'s webhook (replacing any; `created_at` of a replaced one is kept).
///
/// # Errors
/// On database failure.
pub fn set(conn: &mut DbConnection, row: &TeamWebhookRow) -> Result<(), PersistenceError> {
    let updated = diesel::update(w::table.find(row.team_id.as_str()))
        .set((
            w::url.eq(&row.url),
            w::secret_sealed.eq(&row.secret_sealed),
            w::created_by.eq(&row.created_by),
            w::updated_at.eq(from_utc(row.updated_at)),
        ))
        .execute(conn)?;
    if updated == 0 {
        let record = WebhookRecord {
            team_id: row.team_id.to_string(),
            url: row.url.clone(),
            secret_sealed: row.secret_sealed.clone(),
            created_by: row.created_by.clone(),
            created_at: from_utc(row.created_at),
            updated_at: from_utc(row.updated_at),
        };
        diesel::insert_into(w::table).values(record).execute(conn)?;
    }
    Ok(())
}

/// Team `team_id`'s webhook, if any.
///
/// # Errors
/// On database failure.
pub fn find(
    conn: &mut DbConnection,
    team_id: &TeamId,
) -> Result<Option<TeamWebhookRow>, PersistenceError> {
    let record: Option<WebhookRecord> = w::table
        .find(team_id.as_str())
        .select(WebhookRecord::as_select())
        .first(conn)
        .optional()?;
    Ok(record.map(TeamWebhookRow::from))
}

/// Removes team `team_id`'s webhook and drops its deliveries not yet sent; returns whether it
/// had one.
///
/// # Errors
/// On database failure.
pub fn delete(conn: &mut DbConnection, team_id: &TeamId) -> Result<bool, PersistenceError> {
    let team_id = team_id.as_str();
    let removed = diesel::delete(w::table.find(team_id)).execute(conn)?;
    diesel::delete(d::table.filter(d::team_id.eq(team_id)).filter(d::status.eq(PENDING)))
        .execute(conn)?;
    Ok(removed == 1)
}

/// A delivery waiting or being sent.
pub const PENDING: &str = "pending";
/// A delivery the receiver answered with a 2xx.
pub const DELIVERED: &str = "delivered";
/// A delivery given up after its last attempt.
pub const FAILED: &str = "failed";

/// One event to a team's webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    /// UUIDv7 string; the `webhook-id` header (the receiver's idempotency key).
    pub id: String,
    /// The team.
    pub team_id: TeamId,
    /// The event type (`budget.threshold_reached`).
    pub event: String,
    /// The JSON body sent.
    pub payload: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    /// Attempts made.
    pub attempts: i32,
    /// When the next attempt is due, UTC.
    pub next_attempt_at: DateTime<Utc>,
    /// The HTTP status of the last attempt (`None`: none, or no answer).
    pub last_status: Option<i32>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When it was made, UTC.
    pub created_at: DateTime<Utc>,
    /// When the receiver took it, UTC.
    pub delivered_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = d)]
struct DeliveryRecord {
    id: String,
    team_id: String,
    event: String,
    payload: String,
    status: String,
    attempts: i32,
    next_attempt_at: NaiveDateTime,
    locked_until: Option<NaiveDateTime>,
    last_status: Option<i32>,
    last_error: Option<String>,
    created_at: NaiveDateTime,
    delivered_at: Option<NaiveDateTime>,
}

impl From<DeliveryRecord> for DeliveryRow {
    fn from(r: DeliveryRecord) -> Self {
        Self {
            id: r.id,
            team_id: r.team_id.into(),
            event: r.event,
            payload: r.payload,
            status: r.status,
            attempts: r.attempts,
            next_attempt_at: to_utc(r.next_attempt_at),
            last_status: r.last_status,
            last_error: r.last_error,
            created_at: to_utc(r.created_at),
            delivered_at: r.delivered_at.map(to_utc),
        }
    }
}

/// Queues `row` (status `pending`, no attempt yet).
///
/// # Errors
/// On database failure.
pub fn enqueue(conn: &mut DbConnection, row: &DeliveryRow) -> Result<(), PersistenceError> {
    let record = DeliveryRecord {
        id: row.id.clone(),
        team_id: row.team_id.to_string(),
        event: row.event.clone(),
        payload: row.payload.clone(),
        status: PENDING.to_owned(),
        attempts: 0,
        next_attempt_at: from_utc(row.next_attempt_at),
        locked_until: None,
        last_status: None,
        last_error: None,
        created_at: from_utc(row.created_at),
        delivered_at: None,
    };
    diesel::insert_into(d::table).values(record).execute(conn)?;
    Ok(())
}

/// Claims up to `limit` deliveries due at `now` that no node holds, for `hold` from now:
/// each is counted as one more attempt. Returns them with the team's webhook.
///
/// # Errors
/// On database failure.
pub fn claim_due(
    conn: &mut DbConnection,
    now: DateTime<Utc>,
    hold: chrono::Duration,
    limit: i64,
) -> Result<Vec<(DeliveryRow, TeamWebhookRow)>, PersistenceError> {
    let at = from_utc(now);
    let candidates: Vec<String> = d::table
        .filter(d::status.eq(PENDING))
        .filter(d::next_attempt_at.le(at))
        .filter(d::locked_until.is_null().or(d::locked_until.lt(at)))
        .select(d::id)
        .order(d::next_attempt_at.asc())
        .limit(limit)
        .load(conn)?;
    let mut claimed = Vec::new();
    for id in candidates {
        let won = diesel::update(
            d::table
                .find(&id)
                .filter(d::status.eq(PENDING))
                .filter(d::locked_until.is_null().or(d::locked_until.lt(at))),
        )
        .set((d::locked_until.eq(from_utc(now + hold)), d::attempts.eq(d::attempts + 1)))
        .execute(conn)?;
        if won == 0 {
            continue;
        }
        let record: DeliveryRecord =
            d::table.find(&id).select(DeliveryRecord::as_select()).first(conn)?;
        let row = DeliveryRow::from(record);
        match find(conn, &row.team_id)? {
            Some(hook) => claimed.push((row, hook)),
            // The webhook was removed meanwhile: nothing to send it to.
            None => give_up(conn, &id, None, "the team's webhook was removed")?,
        }
    }
    Ok(claimed)
}

/// Marks delivery `id` delivered at `at` with HTTP status `status`.
///
/// # Errors
/// On database failure.
pub fn delivered(
    conn: &mut DbConnection,
    id: &str,
    status: i32,
    at: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    diesel::update(d::table.find(id))
        .set((
            d::status.eq(DELIVERED),
            d::last_status.eq(Some(status)),
            d::last_error.eq(None::<String>),
            d::delivered_at.eq(Some(from_utc(at))),
            d::locked_until.eq(None::<NaiveDateTime>),
        ))
        .execute(conn)?;
    Ok(())
}

/// Notes a failed attempt of delivery `id` (`status`: the receiver's answer, if any) and when
/// to try again.
///
/// # Errors
/// On database failure.
pub fn retry_at(
    conn: &mut DbConnection,
    id: &str,
    status: Option<i32>,
    error: &str,
    next: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    diesel::update(d::table.find(id))
        .set((
            d::last_status.eq(status),
            d::last_error.eq(Some(error)),
            d::next_attempt_at.eq(from_utc(next)),
            d::locked_until.eq(None::<NaiveDateTime>),
        ))
        .execute(conn)?;
    Ok(())
}

/// Gives delivery `id` up after a failed last attempt.
///
/// # Errors
/// On database failure.
pub fn give_up(
    conn: &mut DbConnection,
    id: &str,
    status: Option<i32>,
    error: &str,
) -> Result<(), PersistenceError> {
    diesel::update(d::table.find(id))
        .set((
            d::status.eq(FAILED),
            d::last_status.eq(status),
            d::last_error.eq(Some(error)),
            d::locked_until.eq(None::<NaiveDateTime>),
        ))
        .execute(conn)?;
    Ok(())
}

/// Up to `limit` deliveries of team `team_id`, newest first, after `before` (an id).
///
/// # Errors
/// On database failure.
pub fn list(
    conn: &mut DbConnection,
    team_id: &TeamId,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<DeliveryRow>, PersistenceError> {
    let mut query = d::table
        .filter(d::team_id.eq(team_id.to_string()))
        .select(DeliveryRecord::as_select())
        .into_boxed();
    if let Some(before) = before {
        query = query.filter(d::id.lt(before.to_owned()));
    }
    let rows: Vec<DeliveryRecord> = query.order(d::id.desc()).limit(limit).load(conn)?;
    Ok(rows.into_iter().map(DeliveryRow::from).collect())
}
