//! Repository of `budget_alerts`: the budget alerts sent, one row per budget counter, period
//! and threshold. Inserting is how a node claims an alert: the primary key lets exactly one
//! insert of the same alert succeed, whichever node and however many at once.

use crate::error::PersistenceError;
use crate::models::{from_utc, to_utc};
use crate::pool::DbConnection;
use crate::schema::budget_alerts as a;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

/// An alert: budget counter `counter` (a [`aigw_domain::CounterSubject::name`]) passed
/// `threshold` percent of its limit in `period`. Money in micro-USD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetAlertRow {
    /// The counter's name.
    pub counter: String,
    /// The period (`YYYY-MM-DD` of its first day, or `total`).
    pub period: String,
    /// The threshold passed, percent of the limit.
    pub threshold: i32,
    /// The level: `key`, `member`, `team` or `user`.
    pub scope: String,
    /// The team, for a member's or a team's budget.
    pub team_id: Option<String>,
    /// What was spent when the alert was made.
    pub spent_micros: i64,
    /// The limit then.
    pub limit_micros: i64,
    /// When, UTC.
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = a)]
struct BudgetAlertRecord {
    counter: String,
    period: String,
    threshold: i32,
    scope: String,
    team_id: Option<String>,
    spent_micros: i64,
    limit_micros: i64,
    created_at: NaiveDateTime,
}

/// Inserts `alert` unless it was made already; returns whether this call made it (and so
/// must send it).
///
/// # Errors
/// On database failure.
pub fn claim(conn: &mut DbConnection, alert: &BudgetAlertRow) -> Result<bool, PersistenceError> {
    let record = BudgetAlertRecord {
        counter: alert.counter.clone(),
        period: alert.period.clone(),
        threshold: alert.threshold,
        scope: alert.scope.clone(),
        team_id: alert.team_id.clone(),
        spent_micros: alert.spent_micros,
        limit_micros: alert.limit_micros,
        created_at: from_utc(alert.created_at),
    };
    let inserted = match conn {
        DbConnection::Postgres(c) => {
            diesel::insert_into(a::table).values(record).on_conflict_do_nothing().execute(c)?
        }
        DbConnection::Sqlite(c) => {
            diesel::insert_into(a::table).values(record).on_conflict_do_nothing().execute(c)?
        }
    };
    Ok(inserted == 1)
}

/// The thresholds already alerted for counter `counter` in `period` (a read, so that a budget
/// whose thresholds were all sent costs no write).
///
/// # Errors
/// On database failure.
pub fn claimed(
    conn: &mut DbConnection,
    counter: &str,
    period: &str,
) -> Result<Vec<i32>, PersistenceError> {
    Ok(a::table
        .filter(a::counter.eq(counter))
        .filter(a::period.eq(period))
        .select(a::threshold)
        .load(conn)?)
}

/// The alerts of counter `counter`, newest first (at most `limit`).
///
/// # Errors
/// On database failure.
pub fn of_counter(
    conn: &mut DbConnection,
    counter: &str,
    limit: i64,
) -> Result<Vec<BudgetAlertRow>, PersistenceError> {
    let rows: Vec<BudgetAlertRecord> = a::table
        .filter(a::counter.eq(counter))
        .select(BudgetAlertRecord::as_select())
        .order((a::created_at.desc(), a::threshold.desc()))
        .limit(limit)
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|r| BudgetAlertRow {
            counter: r.counter,
            period: r.period,
            threshold: r.threshold,
            scope: r.scope,
            team_id: r.team_id,
            spent_micros: r.spent_micros,
            limit_micros: r.limit_micros,
            created_at: to_utc(r.created_at),
        })
        .collect())
}
