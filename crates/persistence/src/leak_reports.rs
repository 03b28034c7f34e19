//! Repository of `leak_reports`: the reports of leaked API keys received, one row each,
//! inserted as the first statement of the transaction that revokes the report's keys. The
//! unique `body_digest` of a signed report is what refuses its replay.

use crate::error::PersistenceError;
use crate::pool::DbConnection;
use crate::schema::leak_reports;
use chrono::NaiveDateTime;
use diesel::prelude::*;

/// A row of `leak_reports`.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = leak_reports)]
pub struct LeakReportRow {
    /// UUIDv7 string (named in the audit events of the report).
    pub id: String,
    /// Who sent it: `github`, `admin` or `operator`.
    pub reporter: String,
    /// SHA-256 hex of a signed report's exact body; `None` for a pasted list.
    pub body_digest: Option<String>,
    /// When it was received, UTC.
    pub received_at: NaiveDateTime,
    /// How many secrets it named.
    pub tokens: i64,
}

/// Inserts a report. Call it first in the transaction of the report's revocations: a
/// conflict then leaves nothing to undo but the transaction itself.
///
/// # Errors
/// [`PersistenceError::Conflict`] when a report with the same `body_digest` exists (a replay;
/// the transaction must be rolled back); others on database failure.
pub fn insert(conn: &mut DbConnection, row: &LeakReportRow) -> Result<(), PersistenceError> {
    diesel::insert_into(leak_reports::table).values(row).execute(conn)?;
    Ok(())
}
