//! Repository of `idempotency_keys` (draft-ietf-httpapi-idempotency-key-header): one row per
//! caller scope and key, holding the request's fingerprint, a lease while the first request
//! runs, and then its sealed answer until the row expires.

use crate::error::PersistenceError;
use crate::models::{from_utc, to_utc};
use crate::pool::DbConnection;
use crate::schema::idempotency_keys as t;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

/// A row of `idempotency_keys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRow {
    /// Whose key it is (`user:<id>`).
    pub scope: String,
    /// The `Idempotency-Key` as sent.
    pub idempotency_key: String,
    /// SHA-256 hex of method, path and body.
    pub fingerprint: String,
    /// The answer's HTTP status, once recorded.
    pub status: Option<i32>,
    /// The answer's body, sealed (see `aigw_service::seal`), once recorded.
    pub response_sealed: Option<String>,
    /// When the first request came, UTC.
    pub created_at: DateTime<Utc>,
    /// Until when the first request is considered running, UTC.
    pub locked_until: DateTime<Utc>,
    /// When the row is erased, UTC.
    pub expires_at: DateTime<Utc>,
}

/// The stored form of [`IdempotencyRow`].
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = t)]
struct IdempotencyRecord {
    scope: String,
    idempotency_key: String,
    fingerprint: String,
    status: Option<i32>,
    response_sealed: Option<String>,
    created_at: NaiveDateTime,
    locked_until: NaiveDateTime,
    expires_at: NaiveDateTime,
}

impl From<IdempotencyRecord> for IdempotencyRow {
    fn from(r: IdempotencyRecord) -> Self {
        Self {
            scope: r.scope,
            idempotency_key: r.idempotency_key,
            fingerprint: r.fingerprint,
            status: r.status,
            response_sealed: r.response_sealed,
            created_at: to_utc(r.created_at),
            locked_until: to_utc(r.locked_until),
            expires_at: to_utc(r.expires_at),
        }
    }
}

impl From<&IdempotencyRow> for IdempotencyRecord {
    fn from(r: &IdempotencyRow) -> Self {
        Self {
            scope: r.scope.clone(),
            idempotency_key: r.idempotency_key.clone(),
            fingerprint: r.fingerprint.clone(),
            status: r.status,
            response_sealed: r.response_sealed.clone(),
            created_at: from_utc(r.created_at),
            locked_until: from_utc(r.locked_until),
            expires_at: from_utc(r.expires_at),
        }
    }
}

/// The row of `scope` and `key`, if any.
///
/// # Errors
/// On database failure.
pub fn find(
    conn: &mut DbConnection,
    scope: &str,
    key: &str,
) -> Result<Option<IdempotencyRow>, PersistenceError> {
    let record: Option<IdempotencyRecord> = t::table
        .find((scope, key))
        .select(IdempotencyRecord::as_select())
        .first(conn)
        .optional()?;
    Ok(record.map(IdempotencyRow::from))
}

/// Inserts a new (running) row.
///
/// # Errors
/// [`PersistenceError::Conflict`] when another request inserted it first.
pub fn insert(conn: &mut DbConnection, row: &IdempotencyRow) -> Result<(), PersistenceError> {
    diesel::insert_into(t::table).values(IdempotencyRecord::from(row)).execute(conn)?;
    Ok(())
}

/// Deletes the row of `scope` and `key` if it has no answer yet or has expired by `now`.
///
/// # Errors
/// On database failure.
pub fn delete_unfinished(
    conn: &mut DbConnection,
    scope: &str,
    key: &str,
    now: DateTime<Utc>,
) -> Result<bool, PersistenceError> {
    let now = from_utc(now);
    let n = diesel::delete(
        t::table.find((scope, key)).filter(t::status.is_null().or(t::expires_at.le(now))),
    )
    .execute(conn)?;
    Ok(n > 0)
}

/// Deletes the row of (`scope`, `key`) if it expired by `now`. A write even when nothing
/// matches: as the first statement of a claim's transaction it takes SQLite's write lock up
/// front (waiting on `busy_timeout`), so the claim's later read and insert never upgrade a read
/// lock, which SQLite refuses at once when another claim of the same key committed meanwhile
/// (see `pool::transaction`).
///
/// # Errors
/// On database failure.
pub fn delete_expired_key(
    conn: &mut DbConnection,
    scope: &str,
    key: &str,
    now: DateTime<Utc>,
) -> Result<bool, PersistenceError> {
    let now = from_utc(now);
    let n =
        diesel::delete(t::table.find((scope, key)).filter(t::expires_at.le(now))).execute(conn)?;
    Ok(n > 0)
}

/// Takes over a running row whose lease `seen_lease` has passed: sets a new lease. `false`
/// when someone else took it first.
///
/// # Errors
/// On database failure.
pub fn take_over(
    conn: &mut DbConnection,
    scope: &str,
    key: &str,
    seen_lease: DateTime<Utc>,
    new_lease: DateTime<Utc>,
) -> Result<bool, PersistenceError> {
    let (seen_lease, new_lease) = (from_utc(seen_lease), from_utc(new_lease));
    let n = diesel::update(
        t::table
            .find((scope, key))
            .filter(t::status.is_null())
            .filter(t::locked_until.eq(seen_lease)),
    )
    .set(t::locked_until.eq(new_lease))
    .execute(conn)?;
    Ok(n == 1)
}

/// Records the answer of the running row with lease `lease`. `false` when the row is no
/// longer ours (released, taken over).
///
/// # Errors
/// On database failure.
pub fn complete(
    conn: &mut DbConnection,
    scope: &str,
    key: &str,
    lease: DateTime<Utc>,
    status: i32,
    sealed: &str,
) -> Result<bool, PersistenceError> {
    let lease = from_utc(lease);
    let n = diesel::update(
        t::table.find((scope, key)).filter(t::status.is_null()).filter(t::locked_until.eq(lease)),
    )
    .set((t::status.eq(Some(status)), t::response_sealed.eq(Some(sealed))))
    .execute(conn)?;
    Ok(n == 1)
}

/// Deletes every row that expired by `now`; returns how many.
///
/// # Errors
/// On database failure.
pub fn delete_expired(
    conn: &mut DbConnection,
    now: DateTime<Utc>,
) -> Result<usize, PersistenceError> {
    Ok(diesel::delete(t::table.filter(t::expires_at.le(from_utc(now)))).execute(conn)?)
}
