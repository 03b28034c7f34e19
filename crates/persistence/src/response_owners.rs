//! Repository of `response_owners`: which API key created each stored response of the
//! Responses API, and which provider holds it. The gateway writes a row when the provider's
//! answer names the response's id, reads it before passing a retrieval through (only the
//! key that created the response may read or delete it), removes it when the response is
//! deleted, and prunes rows older than the usage ledger's retention.

use crate::error::PersistenceError;
use crate::pool::DbConnection;
use crate::schema::response_owners;
use aigw_domain::ApiKeyId;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

/// The owner of a stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseOwner {
    /// The provider's id of the response (`resp_…`).
    pub response_id: String,
    /// The API key that created it.
    pub api_key_id: ApiKeyId,
    /// The configured `name` of the provider that holds it.
    pub provider: String,
    /// When the gateway saw it created, UTC.
    pub created_at: DateTime<Utc>,
}

/// A row of `response_owners`, as stored.
#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = response_owners)]
struct Row {
    response_id: String,
    api_key_id: String,
    provider: String,
    created_at: NaiveDateTime,
}

impl From<Row> for ResponseOwner {
    fn from(row: Row) -> Self {
        Self {
            response_id: row.response_id,
            api_key_id: row.api_key_id.into(),
            provider: row.provider,
            created_at: row.created_at.and_utc(),
        }
    }
}

/// Records `owner`.
///
/// # Errors
/// [`PersistenceError::Conflict`] when the response id is already recorded (its first owner
/// stays); others on database failure.
pub fn insert(conn: &mut DbConnection, owner: &ResponseOwner) -> Result<(), PersistenceError> {
    let row = Row {
        response_id: owner.response_id.clone(),
        api_key_id: owner.api_key_id.as_str().to_owned(),
        provider: owner.provider.clone(),
        created_at: owner.created_at.naive_utc(),
    };
    diesel::insert_into(response_owners::table).values(&row).execute(conn)?;
    Ok(())
}

/// The owner of response `response_id`; `None` when the gateway recorded none.
///
/// # Errors
/// On database failure.
pub fn find(
    conn: &mut DbConnection,
    response_id: &str,
) -> Result<Option<ResponseOwner>, PersistenceError> {
    let row = response_owners::table
        .find(response_id)
        .select(Row::as_select())
        .first::<Row>(conn)
        .optional()?;
    Ok(row.map(ResponseOwner::from))
}

/// Removes the owner of response `response_id`. Returns whether there was one.
///
/// # Errors
/// On database failure.
pub fn delete(conn: &mut DbConnection, response_id: &str) -> Result<bool, PersistenceError> {
    let removed = diesel::delete(response_owners::table.find(response_id)).execute(conn)?;
    Ok(removed > 0)
}

/// Removes at most `limit` owners recorded before `cutoff` (UTC). Returns how many.
///
/// # Errors
/// On database failure.
pub fn prune_before(
    conn: &mut DbConnection,
    cutoff: NaiveDateTime,
    limit: i64,
) -> Result<usize, PersistenceError> {
    let oldest: Vec<String> = response_owners::table
        .filter(response_owners::created_at.lt(cutoff))
        .select(response_owners::response_id)
        .limit(limit)
        .load(conn)?;
    if oldest.is_empty() {
        return Ok(0);
    }
    let removed =
        diesel::delete(response_owners::table.filter(response_owners::response_id.eq_any(oldest)))
            .execute(conn)?;
    Ok(removed)
}
