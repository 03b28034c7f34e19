//! Repository of the TOTP second factor: `mfa_totp` (one row per user), `mfa_recovery_codes`
//! and `mfa_challenges`.
//!
//! Every single-use rule is a compare-and-set, one `UPDATE … WHERE` whose row count says
//! whether this caller won: a TOTP time step ([`claim_step`]), a recovery code
//! ([`use_recovery_code`]), a challenge's attempt ([`reserve_attempt`]) and its completion
//! ([`complete_challenge`]). On PostgreSQL a concurrent update waits for the row lock and then
//! sees the new value; on SQLite writers are serialised. Callers make such an `UPDATE` the
//! first statement of their transaction, so SQLite takes its write lock at once.

use crate::error::PersistenceError;
use crate::pool::DbConnection;
use crate::schema::{mfa_challenges, mfa_recovery_codes, mfa_totp};
use aigw_domain::{MfaChallengeId, RecoveryCodeId, UserId};
use chrono::NaiveDateTime;
use diesel::prelude::*;

/// A row of `mfa_totp`. Times are UTC.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = mfa_totp)]
pub struct TotpRow {
    /// The user.
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub user_id: UserId,
    /// The base32 secret, sealed (see the service's `mfa` module).
    pub secret_sealed: String,
    /// When the enrollment started.
    pub created_at: NaiveDateTime,
    /// When the first code confirmed it; `None` while pending.
    pub enabled_at: Option<NaiveDateTime>,
    /// The last accepted time step (Unix seconds / 30).
    pub last_used_step: Option<i64>,
}

/// A row of `mfa_recovery_codes`.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = mfa_recovery_codes)]
pub struct RecoveryCodeRow {
    /// UUIDv7 string.
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub id: RecoveryCodeId,
    /// The user.
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub user_id: UserId,
    /// SHA-256 hex digest of the code's canonical form.
    pub code_hash: String,
    /// Creation time, UTC.
    pub created_at: NaiveDateTime,
    /// When it was used, UTC.
    pub used_at: Option<NaiveDateTime>,
}

/// A row of `mfa_challenges`.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = mfa_challenges)]
pub struct ChallengeRow {
    /// UUIDv7 string.
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub id: MfaChallengeId,
    /// SHA-256 hex digest of the challenge token.
    pub token_hash: String,
    /// The user whose password was right.
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub user_id: UserId,
    /// Creation time, UTC.
    pub created_at: NaiveDateTime,
    /// End of validity, UTC.
    pub expires_at: NaiveDateTime,
    /// Codes tried so far.
    pub attempts: i64,
    /// When a code completed the login, UTC.
    pub used_at: Option<NaiveDateTime>,
}

/// The TOTP row of `user_id`, pending or enabled.
///
/// # Errors
/// On database failure.
pub fn find_totp(
    conn: &mut DbConnection,
    user_id: &UserId,
) -> Result<Option<TotpRow>, PersistenceError> {
    let user_id = user_id.as_str();
    Ok(mfa_totp::table.find(user_id).select(TotpRow::as_select()).first(conn).optional()?)
}

/// Whether `user_id` has an enabled TOTP factor.
///
/// # Errors
/// On database failure.
pub fn totp_enabled(conn: &mut DbConnection, user_id: &UserId) -> Result<bool, PersistenceError> {
    let user_id = user_id.as_str();
    let n: i64 = mfa_totp::table
        .filter(mfa_totp::user_id.eq(user_id))
        .filter(mfa_totp::enabled_at.is_not_null())
        .count()
        .get_result(conn)?;
    Ok(n > 0)
}

/// Replaces a pending enrollment of `row.user_id` (if any) with `row`. Returns false, changing
/// nothing, when the user's factor is already enabled.
///
/// # Errors
/// On database failure.
pub fn start_enrollment(conn: &mut DbConnection, row: &TotpRow) -> Result<bool, PersistenceError> {
    // The DELETE first: SQLite takes its write lock before the read below.
    diesel::delete(
        mfa_totp::table
            .filter(mfa_totp::user_id.eq(row.user_id.as_str()))
            .filter(mfa_totp::enabled_at.is_null()),
    )
    .execute(conn)?;
    if find_totp(conn, &UserId::from(row.user_id.as_str()))?.is_some() {
        return Ok(false);
    }
    diesel::insert_into(mfa_totp::table).values(row.clone()).execute(conn)?;
    Ok(true)
}

/// Turns the pending factor of `user_id` whose sealed secret is `secret_sealed` on at `now`,
/// with `step` as its last used step. Returns whether it was pending (false: none, already
/// enabled, or replaced by another enrollment meanwhile).
///
/// # Errors
/// On database failure.
pub fn enable_totp(
    conn: &mut DbConnection,
    user_id: &UserId,
    secret_sealed: &str,
    step: i64,
    now: NaiveDateTime,
) -> Result<bool, PersistenceError> {
    let user_id = user_id.as_str();
    let n = diesel::update(
        mfa_totp::table
            .filter(mfa_totp::user_id.eq(user_id))
            .filter(mfa_totp::secret_sealed.eq(secret_sealed))
            .filter(mfa_totp::enabled_at.is_null()),
    )
    .set((mfa_totp::enabled_at.eq(now), mfa_totp::last_used_step.eq(step)))
    .execute(conn)?;
    Ok(n == 1)
}

/// Accepts time step `step` for the enabled factor of `user_id` if it is later than the last
/// accepted one, and makes it the last. Returns whether it was (false: the step, or a later
/// one, was already used, or there is no enabled factor). Of two concurrent claims of one
/// step, on any nodes, exactly one wins.
///
/// # Errors
/// On database failure.
pub fn claim_step(
    conn: &mut DbConnection,
    user_id: &UserId,
    step: i64,
) -> Result<bool, PersistenceError> {
    let user_id = user_id.as_str();
    let n = diesel::update(
        mfa_totp::table
            .filter(mfa_totp::user_id.eq(user_id))
            .filter(mfa_totp::enabled_at.is_not_null())
            .filter(mfa_totp::last_used_step.is_null().or(mfa_totp::last_used_step.lt(step))),
    )
    .set(mfa_totp::last_used_step.eq(step))
    .execute(conn)?;
    Ok(n == 1)
}

/// Removes the factor of `user_id` and its recovery codes. Returns whether it was enabled.
///
/// # Errors
/// On database failure.
pub fn delete_totp(conn: &mut DbConnection, user_id: &UserId) -> Result<bool, PersistenceError> {
    let user_id = user_id.as_str();
    let n = diesel::delete(
        mfa_totp::table
            .filter(mfa_totp::user_id.eq(user_id))
            .filter(mfa_totp::enabled_at.is_not_null()),
    )
    .execute(conn)?;
    diesel::delete(mfa_totp::table.filter(mfa_totp::user_id.eq(user_id))).execute(conn)?;
    diesel::delete(mfa_recovery_codes::table.filter(mfa_recovery_codes::user_id.eq(user_id)))
        .execute(conn)?;
    diesel::delete(mfa_challenges::table.filter(mfa_challenges::user_id.eq(user_id)))
        .execute(conn)?;
    Ok(n == 1)
}

/// Replaces every recovery code of `user_id` with `rows`.
///
/// # Errors
/// On database failure.
pub fn replace_recovery_codes(
    conn: &mut DbConnection,
    user_id: &UserId,
    rows: &[RecoveryCodeRow],
) -> Result<(), PersistenceError> {
    let user_id = user_id.as_str();
    diesel::delete(mfa_recovery_codes::table.filter(mfa_recovery_codes::user_id.eq(user_id)))
        .execute(conn)?;
    // One statement per row: a multi-row insert is not one query on every backend diesel's
    // `MultiConnection` serves.
    for row in rows {
        diesel::insert_into(mfa_recovery_codes::table).values(row.clone()).execute(conn)?;
    }
    Ok(())
}

/// Marks the unused recovery code of `user_id` with digest `code_hash` used at `now`. Returns
/// whether there was one (a code works once).
///
/// # Errors
/// On database failure.
pub fn use_recovery_code(
    conn: &mut DbConnection,
    user_id: &UserId,
    code_hash: &str,
    now: NaiveDateTime,
) -> Result<bool, PersistenceError> {
    let user_id = user_id.as_str();
    let n = diesel::update(
        mfa_recovery_codes::table
            .filter(mfa_recovery_codes::user_id.eq(user_id))
            .filter(mfa_recovery_codes::code_hash.eq(code_hash))
            .filter(mfa_recovery_codes::used_at.is_null()),
    )
    .set(mfa_recovery_codes::used_at.eq(now))
    .execute(conn)?;
    Ok(n == 1)
}

/// How many unused recovery codes `user_id` has.
///
/// # Errors
/// On database failure.
pub fn unused_recovery_codes(
    conn: &mut DbConnection,
    user_id: &UserId,
) -> Result<i64, PersistenceError> {
    let user_id = user_id.as_str();
    Ok(mfa_recovery_codes::table
        .filter(mfa_recovery_codes::user_id.eq(user_id))
        .filter(mfa_recovery_codes::used_at.is_null())
        .count()
        .get_result(conn)?)
}

/// Inserts a challenge, first deleting the user's challenges that ended before
/// `ended_before` (keep the ones whose failed attempts still count, see
/// [`failed_attempts_since`]).
///
/// # Errors
/// On database failure.
pub fn insert_challenge(
    conn: &mut DbConnection,
    row: &ChallengeRow,
    ended_before: NaiveDateTime,
) -> Result<(), PersistenceError> {
    diesel::delete(
        mfa_challenges::table
            .filter(mfa_challenges::user_id.eq(row.user_id.as_str()))
            .filter(mfa_challenges::expires_at.lt(ended_before)),
    )
    .execute(conn)?;
    diesel::insert_into(mfa_challenges::table).values(row.clone()).execute(conn)?;
    Ok(())
}

/// The wrong codes tried on user `user_id`'s challenges created at or after `since` (every
/// counted attempt, less the one that completed each used challenge), and when the oldest of
/// those challenges was created.
///
/// # Errors
/// On database failure.
pub fn failed_attempts_since(
    conn: &mut DbConnection,
    user_id: &UserId,
    since: NaiveDateTime,
) -> Result<(i64, Option<NaiveDateTime>), PersistenceError> {
    let user_id = user_id.as_str();
    let rows: Vec<(i64, Option<NaiveDateTime>, NaiveDateTime)> = mfa_challenges::table
        .filter(mfa_challenges::user_id.eq(user_id))
        .filter(mfa_challenges::created_at.ge(since))
        .filter(mfa_challenges::attempts.gt(0))
        .select((mfa_challenges::attempts, mfa_challenges::used_at, mfa_challenges::created_at))
        .load(conn)?;
    let failed = rows.iter().map(|(attempts, used, _)| attempts - i64::from(used.is_some())).sum();
    let oldest = rows.iter().filter(|(a, u, _)| a - i64::from(u.is_some()) > 0).map(|r| r.2).min();
    Ok((failed, oldest))
}

/// The challenge with digest `token_hash`.
///
/// # Errors
/// On database failure.
pub fn find_challenge(
    conn: &mut DbConnection,
    token_hash: &str,
) -> Result<Option<ChallengeRow>, PersistenceError> {
    Ok(mfa_challenges::table
        .filter(mfa_challenges::token_hash.eq(token_hash))
        .select(ChallengeRow::as_select())
        .first(conn)
        .optional()?)
}

/// Counts one attempt of the open challenge with digest `token_hash` (unused, unexpired at
/// `now`, fewer than `max_attempts` tried). Returns whether it was open: a code may be tried
/// only when this returns true, so no challenge is tried more than `max_attempts` times,
/// however many nodes try it at once.
///
/// # Errors
/// On database failure.
pub fn reserve_attempt(
    conn: &mut DbConnection,
    token_hash: &str,
    now: NaiveDateTime,
    max_attempts: i64,
) -> Result<bool, PersistenceError> {
    let n = diesel::update(
        mfa_challenges::table
            .filter(mfa_challenges::token_hash.eq(token_hash))
            .filter(mfa_challenges::used_at.is_null())
            .filter(mfa_challenges::expires_at.gt(now))
            .filter(mfa_challenges::attempts.lt(max_attempts)),
    )
    .set(mfa_challenges::attempts.eq(mfa_challenges::attempts + 1))
    .execute(conn)?;
    Ok(n == 1)
}

/// Marks challenge `id` used at `now` if it is still unused and unexpired. Returns whether
/// this call completed it (a challenge completes one login).
///
/// # Errors
/// On database failure.
pub fn complete_challenge(
    conn: &mut DbConnection,
    id: &MfaChallengeId,
    now: NaiveDateTime,
) -> Result<bool, PersistenceError> {
    let n = diesel::update(
        mfa_challenges::table
            .filter(mfa_challenges::id.eq(id.as_str()))
            .filter(mfa_challenges::used_at.is_null())
            .filter(mfa_challenges::expires_at.gt(now)),
    )
    .set(mfa_challenges::used_at.eq(now))
    .execute(conn)?;
    Ok(n == 1)
}

/// Deletes every challenge that ended before `before` (used or expired); returns how many.
///
/// # Errors
/// On database failure.
pub fn prune_challenges_before(
    conn: &mut DbConnection,
    before: NaiveDateTime,
) -> Result<usize, PersistenceError> {
    Ok(diesel::delete(mfa_challenges::table.filter(mfa_challenges::expires_at.lt(before)))
        .execute(conn)?)
}
