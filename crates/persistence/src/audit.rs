//! Repository of `audit_events`: appended inside the transaction of the change an
//! event records, read newest first by keyset paging, pruned by age.

use crate::error::PersistenceError;
use crate::pool::DbConnection;
use crate::schema::audit_events;
use aigw_domain::{AuditAction, RecordedAction};
use chrono::NaiveDateTime;
use diesel::prelude::*;

/// A row of `audit_events`.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = audit_events)]
pub struct AuditEventRow {
    /// UUIDv7 string (time-ordered: the paging key).
    pub id: String,
    /// When, UTC.
    pub at: NaiveDateTime,
    /// The account the event concerns (`None`: none, e.g. a failed login of an unknown e-mail).
    pub user_id: Option<String>,
    /// Who acted: a user id or an API key id (`None`: nobody authenticated, or the operator).
    pub actor: Option<String>,
    /// The action, stored by its `snake_case` name (e.g. `login_succeeded`); a name this
    /// version does not know reads back as [`RecordedAction::Unknown`].
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub action: RecordedAction,
    /// What was acted on (a user, session or key id).
    pub target: Option<String>,
    /// Client address.
    pub ip: Option<String>,
    /// Client `User-Agent` (at most 256 characters).
    pub user_agent: Option<String>,
    /// The request's `x-request-id`.
    pub request_id: Option<String>,
    /// JSON object text; never a secret.
    pub details: String,
}

/// Appends `row`.
///
/// # Errors
/// On database failure.
pub fn insert(conn: &mut DbConnection, row: &AuditEventRow) -> Result<(), PersistenceError> {
    diesel::insert_into(audit_events::table).values(row.clone()).execute(conn)?;
    Ok(())
}

/// Up to `limit` events, newest first, of `user_id` and of `action` when given, after id
/// `before` when given.
///
/// # Errors
/// On database failure.
pub fn list(
    conn: &mut DbConnection,
    user_id: Option<&str>,
    action: Option<AuditAction>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<AuditEventRow>, PersistenceError> {
    let mut query = audit_events::table.select(AuditEventRow::as_select()).into_boxed();
    if let Some(user_id) = user_id {
        query = query.filter(audit_events::user_id.eq(user_id.to_owned()));
    }
    if let Some(action) = action {
        query = query.filter(audit_events::action.eq(action.as_str()));
    }
    if let Some(before) = before {
        query = query.filter(audit_events::id.lt(before.to_owned()));
    }
    Ok(query.order(audit_events::id.desc()).limit(limit).load(conn)?)
}

/// Deletes up to `batch` events older than `cutoff` (UTC); returns how many.
///
/// # Errors
/// On database failure.
pub fn prune_before(
    conn: &mut DbConnection,
    cutoff: NaiveDateTime,
    batch: i64,
) -> Result<usize, PersistenceError> {
    let ids: Vec<String> = audit_events::table
        .filter(audit_events::at.lt(cutoff))
        .select(audit_events::id)
        .limit(batch)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(diesel::delete(audit_events::table.filter(audit_events::id.eq_any(ids))).execute(conn)?)
}
