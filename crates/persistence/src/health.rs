//! Repository of `health_checks`: the readiness write probe.

use crate::error::PersistenceError;
use crate::models::from_utc;
use crate::pool::DbConnection;
use crate::schema::health_checks;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// Reads (`SELECT 1`) and then writes and commits this node's row, so a database that
/// answers reads but refuses writes (disk full, read-only) is noticed.
///
/// # Errors
/// [`PersistenceError::Unavailable`] (or another class) when either fails.
pub fn probe(
    conn: &mut DbConnection,
    node: &str,
    now: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    let now = from_utc(now);
    crate::ping(conn)?;
    let updated = diesel::update(health_checks::table.find(node))
        .set(health_checks::checked_at.eq(now))
        .execute(conn)?;
    if updated == 0 {
        let inserted = diesel::insert_into(health_checks::table)
            .values((health_checks::node.eq(node), health_checks::checked_at.eq(now)))
            .execute(conn);
        match inserted.map_err(PersistenceError::from) {
            Ok(_) | Err(PersistenceError::Conflict) => {}
            Err(e) => return Err(e),
        }
        // A new node (process) has started: forget the rows of nodes gone for a day.
        let day_ago = now - chrono::Duration::days(1);
        diesel::delete(health_checks::table.filter(health_checks::checked_at.lt(day_ago)))
            .execute(conn)?;
    }
    Ok(())
}
