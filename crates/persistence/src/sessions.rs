//! Repository of `sessions` and their `refresh_tokens` (one rotation family per session).
//!
//! Rotation is a compare-and-set: [`claim_for_rotation`] marks a token used only if nobody has
//! yet, in one `UPDATE … WHERE rotated_at IS NULL`. On PostgreSQL a concurrent claim waits for
//! the row lock and then sees the token taken; on SQLite writers are serialised. Either way
//! exactly one caller wins, and callers make that `UPDATE` the first statement of their
//! transaction, so SQLite takes the write lock at once rather than upgrading a read lock.

use crate::error::PersistenceError;
use crate::models::{
    from_utc, to_utc, RefreshTokenRecord, RefreshTokenRow, SessionRecord, SessionRow,
};
use crate::pool::DbConnection;
use crate::schema::{refresh_tokens, sessions};
use aigw_domain::{RefreshTokenId, SessionId, UserId};
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// Inserts a session.
///
/// # Errors
/// On database failure.
pub fn insert_session(conn: &mut DbConnection, row: &SessionRow) -> Result<(), PersistenceError> {
    diesel::insert_into(sessions::table).values(SessionRecord::from(row)).execute(conn)?;
    Ok(())
}

/// Inserts a refresh token.
///
/// # Errors
/// [`PersistenceError::Conflict`] on a digest collision; others on database failure.
pub fn insert_refresh_token(
    conn: &mut DbConnection,
    row: &RefreshTokenRow,
) -> Result<(), PersistenceError> {
    diesel::insert_into(refresh_tokens::table)
        .values(RefreshTokenRecord::from(row))
        .execute(conn)?;
    Ok(())
}

/// Marks the unused token with digest `token_hash` as rotated at `now`, keeping
/// `successor_sealed`. Returns whether this call won (false: no such token, or already used).
///
/// # Errors
/// On database failure.
pub fn claim_for_rotation(
    conn: &mut DbConnection,
    token_hash: &str,
    now: DateTime<Utc>,
    successor_sealed: Option<&str>,
) -> Result<bool, PersistenceError> {
    let n = diesel::update(
        refresh_tokens::table
            .filter(refresh_tokens::token_hash.eq(token_hash))
            .filter(refresh_tokens::rotated_at.is_null()),
    )
    .set((
        refresh_tokens::rotated_at.eq(from_utc(now)),
        refresh_tokens::successor_sealed.eq(successor_sealed),
    ))
    .execute(conn)?;
    Ok(n == 1)
}

/// The refresh token with digest `token_hash` and its session, if any.
///
/// # Errors
/// On database failure.
pub fn find_refresh_token(
    conn: &mut DbConnection,
    token_hash: &str,
) -> Result<Option<(RefreshTokenRow, SessionRow)>, PersistenceError> {
    Ok(refresh_tokens::table
        .inner_join(sessions::table)
        .filter(refresh_tokens::token_hash.eq(token_hash))
        .select((RefreshTokenRecord::as_select(), SessionRecord::as_select()))
        .first::<(RefreshTokenRecord, SessionRecord)>(conn)
        .optional()?
        .map(|(token, session)| (token.into(), session.into())))
}

/// The child (successor) of refresh token `parent_id`, if it has one.
///
/// # Errors
/// On database failure.
pub fn find_successor(
    conn: &mut DbConnection,
    parent_id: &RefreshTokenId,
) -> Result<Option<RefreshTokenRow>, PersistenceError> {
    Ok(refresh_tokens::table
        .filter(refresh_tokens::parent_id.eq(parent_id.as_str()))
        .select(RefreshTokenRecord::as_select())
        .first(conn)
        .optional()?
        .map(RefreshTokenRow::from))
}

/// Revokes session `id` (if not already revoked) at `now` for `reason`, and drops the sealed
/// successors its tokens still hold. Returns whether the session was live until now.
///
/// # Errors
/// On database failure.
pub fn revoke_session(
    conn: &mut DbConnection,
    id: &SessionId,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<bool, PersistenceError> {
    let id = id.as_str();
    let now = from_utc(now);
    let n = diesel::update(sessions::table.find(id).filter(sessions::revoked_at.is_null()))
        .set((sessions::revoked_at.eq(now), sessions::revoked_reason.eq(reason)))
        .execute(conn)?;
    diesel::update(refresh_tokens::table.filter(refresh_tokens::session_id.eq(id)))
        .set(refresh_tokens::successor_sealed.eq(None::<String>))
        .execute(conn)?;
    Ok(n == 1)
}

/// Revokes every live session of `user_id` except `keep` (if given) at `now` for `reason`.
/// Returns the ids of the sessions revoked.
///
/// # Errors
/// On database failure.
pub fn revoke_user_sessions(
    conn: &mut DbConnection,
    user_id: &UserId,
    keep: Option<&SessionId>,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<Vec<String>, PersistenceError> {
    let user_id = user_id.as_str();
    let keep = keep.map(SessionId::as_str);
    let now = from_utc(now);
    conn.transaction(|conn| {
        // The UPDATE comes first so SQLite takes the write lock before reading.
        let mut query = diesel::update(
            sessions::table
                .filter(sessions::user_id.eq(user_id))
                .filter(sessions::revoked_at.is_null()),
        )
        .into_boxed();
        if let Some(keep) = keep {
            query = query.filter(sessions::id.ne(keep));
        }
        query
            .set((sessions::revoked_at.eq(now), sessions::revoked_reason.eq(reason)))
            .execute(conn)?;
        let revoked: Vec<String> = sessions::table
            .filter(sessions::user_id.eq(user_id))
            .filter(sessions::revoked_at.eq(now))
            .filter(sessions::revoked_reason.eq(reason))
            .select(sessions::id)
            .load(conn)?;
        Ok(revoked)
    })
}

/// Whether session `id` is revoked (an unknown id counts as revoked: it cannot be live).
///
/// # Errors
/// On database failure.
pub fn is_revoked(conn: &mut DbConnection, id: &SessionId) -> Result<bool, PersistenceError> {
    let id = id.as_str();
    let revoked_at = sessions::table
        .find(id)
        .select(sessions::revoked_at)
        .first::<Option<chrono::NaiveDateTime>>(conn)
        .optional()?;
    Ok(!matches!(revoked_at, Some(None)))
}

/// Ids of sessions revoked at or after `since` (used to warm a revocation cache).
///
/// # Errors
/// On database failure.
pub fn revoked_since(
    conn: &mut DbConnection,
    since: DateTime<Utc>,
) -> Result<Vec<(String, DateTime<Utc>)>, PersistenceError> {
    Ok(sessions::table
        .filter(sessions::revoked_at.ge(from_utc(since)))
        .select((sessions::id, sessions::revoked_at.assume_not_null()))
        .load::<(String, chrono::NaiveDateTime)>(conn)?
        .into_iter()
        .map(|(id, at)| (id, to_utc(at)))
        .collect())
}

/// Erases the sealed successor held by refresh token `id` (once its successor has been used,
/// the grace window no longer applies to it).
///
/// # Errors
/// On database failure.
pub fn clear_sealed(conn: &mut DbConnection, id: &RefreshTokenId) -> Result<(), PersistenceError> {
    diesel::update(refresh_tokens::table.find(id.as_str()))
        .set(refresh_tokens::successor_sealed.eq(None::<String>))
        .execute(conn)?;
    Ok(())
}

/// Erases every sealed successor of tokens rotated before `before` (their grace window has
/// passed). Returns how many were erased.
///
/// # Errors
/// On database failure.
pub fn clear_sealed_before(
    conn: &mut DbConnection,
    before: DateTime<Utc>,
) -> Result<usize, PersistenceError> {
    Ok(diesel::update(
        refresh_tokens::table
            .filter(refresh_tokens::successor_sealed.is_not_null())
            .filter(refresh_tokens::rotated_at.lt(from_utc(before))),
    )
    .set(refresh_tokens::successor_sealed.eq(None::<String>))
    .execute(conn)?)
}

/// The live sessions of `user_id` (not revoked, not past their end at `now`), newest first.
///
/// # Errors
/// On database failure.
pub fn list_live_for_user(
    conn: &mut DbConnection,
    user_id: &UserId,
    now: DateTime<Utc>,
) -> Result<Vec<SessionRow>, PersistenceError> {
    let user_id = user_id.as_str();
    Ok(sessions::table
        .filter(sessions::user_id.eq(user_id))
        .filter(sessions::revoked_at.is_null())
        .filter(sessions::expires_at.gt(from_utc(now)))
        .order(sessions::id.desc())
        .select(SessionRecord::as_select())
        .load(conn)?
        .into_iter()
        .map(SessionRow::from)
        .collect())
}

/// Revokes session `id` of `user_id` at `now` for `reason`. Returns whether it was live
/// (false: no such session of that user, or already revoked).
///
/// # Errors
/// On database failure.
pub fn revoke_own_session(
    conn: &mut DbConnection,
    id: &SessionId,
    user_id: &UserId,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<bool, PersistenceError> {
    let id = id.as_str();
    let user_id = user_id.as_str();
    let n = diesel::update(
        sessions::table
            .filter(sessions::id.eq(id))
            .filter(sessions::user_id.eq(user_id))
            .filter(sessions::revoked_at.is_null()),
    )
    .set((sessions::revoked_at.eq(from_utc(now)), sessions::revoked_reason.eq(reason)))
    .execute(conn)?;
    Ok(n == 1)
}

/// Records a use (a refresh) of session `id` at `now`.
///
/// # Errors
/// On database failure.
pub fn touch(
    conn: &mut DbConnection,
    id: &SessionId,
    now: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    let id = id.as_str();
    diesel::update(sessions::table.find(id))
        .set(sessions::last_used_at.eq(from_utc(now)))
        .execute(conn)?;
    Ok(())
}

/// Retires every unused refresh token of session `id` at `now` (as if rotated, with no
/// successor to hand out again): presenting one later is a reuse. Used when a password change
/// issues the session a fresh refresh token.
///
/// # Errors
/// On database failure.
pub fn retire_refresh_tokens(
    conn: &mut DbConnection,
    id: &SessionId,
    now: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    let id = id.as_str();
    diesel::update(
        refresh_tokens::table
            .filter(refresh_tokens::session_id.eq(id))
            .filter(refresh_tokens::rotated_at.is_null()),
    )
    .set((
        refresh_tokens::rotated_at.eq(from_utc(now)),
        refresh_tokens::successor_sealed.eq(None::<String>),
    ))
    .execute(conn)?;
    Ok(())
}

/// Session `id`, if any.
///
/// # Errors
/// On database failure.
pub fn find_session(
    conn: &mut DbConnection,
    id: &SessionId,
) -> Result<Option<SessionRow>, PersistenceError> {
    let id = id.as_str();
    Ok(sessions::table
        .find(id)
        .select(SessionRecord::as_select())
        .first(conn)
        .optional()?
        .map(SessionRow::from))
}
