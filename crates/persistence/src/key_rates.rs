//! Per-key request and token counters of one-minute windows (`key_rate_windows`):
//! the `rpm_limit` and `tpm_limit` of API keys, shared by every node of the database.
//!
//! A call is admitted by one conditional `UPDATE` that adds one request and its worst-case
//! tokens only if both stay within the limits, as budgets do (`crate::budgets`); the tokens
//! settle to the real count after the answer.

use crate::error::PersistenceError;
use crate::pool::DbConnection;
use crate::schema::key_rate_windows as w;
use diesel::prelude::*;

/// A window's counts after an admission attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowCounts {
    /// Whether the call was admitted (and counted).
    pub admitted: bool,
    /// Requests counted in the window.
    pub requests: i64,
    /// Tokens counted in the window.
    pub tokens: i64,
}

/// Admits `requests` calls (1, or a node's lease of several) of key `key_id` using `tokens`
/// worst-case tokens in all, in the window starting at `window_start` (Unix seconds), against
/// `rpm` requests and `tpm` tokens (`i64::MAX`: no limit). Creates the window's row when
/// missing.
///
/// # Errors
/// On database failure.
pub fn admit(
    conn: &mut DbConnection,
    key_id: &str,
    window_start: i64,
    (requests, tokens): (i64, i64),
    rpm: i64,
    tpm: i64,
) -> Result<WindowCounts, PersistenceError> {
    let row = w::table.filter(w::api_key_id.eq(key_id)).filter(w::window_start.eq(window_start));
    let try_admit = |conn: &mut DbConnection| {
        diesel::update(
            row.filter(w::requests.le(rpm.saturating_sub(requests)))
                .filter(w::tokens.le(tpm.saturating_sub(tokens))),
        )
        .set((w::requests.eq(w::requests + requests), w::tokens.eq(w::tokens + tokens)))
        .execute(conn)
    };
    let mut admitted = try_admit(conn)? == 1;
    if !admitted {
        let exists: Option<i64> = row.select(w::requests).first(conn).optional()?;
        if exists.is_none() {
            let fresh = (
                w::api_key_id.eq(key_id),
                w::window_start.eq(window_start),
                w::requests.eq(0_i64),
                w::tokens.eq(0_i64),
            );
            match conn {
                DbConnection::Postgres(c) => diesel::insert_into(w::table)
                    .values(fresh)
                    .on_conflict_do_nothing()
                    .execute(c)?,
                DbConnection::Sqlite(c) => diesel::insert_into(w::table)
                    .values(fresh)
                    .on_conflict_do_nothing()
                    .execute(c)?,
            };
            admitted = try_admit(conn)? == 1;
            // Once per key and minute: forget the key's earlier windows.
            diesel::delete(
                w::table.filter(w::api_key_id.eq(key_id)).filter(w::window_start.lt(window_start)),
            )
            .execute(conn)?;
        }
    }
    let (requests, tokens) = row
        .select((w::requests, w::tokens))
        .first::<(i64, i64)>(conn)
        .optional()?
        .unwrap_or((0, 0));
    Ok(WindowCounts { admitted, requests, tokens })
}

/// Adds `delta` tokens (real minus reserved) to the window of key `key_id` starting at
/// `window_start`; never below 0.
///
/// # Errors
/// On database failure.
pub fn settle_tokens(
    conn: &mut DbConnection,
    key_id: &str,
    window_start: i64,
    delta: i64,
) -> Result<(), PersistenceError> {
    if delta == 0 {
        return Ok(());
    }
    let row = w::table.filter(w::api_key_id.eq(key_id)).filter(w::window_start.eq(window_start));
    if delta > 0 {
        diesel::update(row).set(w::tokens.eq(w::tokens + delta)).execute(conn)?;
        return Ok(());
    }
    // max(tokens + delta, 0), portable: the clamp first, so that the subtraction cannot be
    // clamped a second time.
    let clamped =
        diesel::update(row.filter(w::tokens.lt(-delta))).set(w::tokens.eq(0_i64)).execute(conn)?;
    if clamped == 0 {
        diesel::update(row.filter(w::tokens.ge(-delta)))
            .set(w::tokens.eq(w::tokens + delta))
            .execute(conn)?;
    }
    Ok(())
}

/// Takes `requests` (admitted by a lease but never used) off the window of key `key_id`
/// starting at `window_start`; never below 0.
///
/// # Errors
/// On database failure.
pub fn give_back_requests(
    conn: &mut DbConnection,
    key_id: &str,
    window_start: i64,
    requests: i64,
) -> Result<(), PersistenceError> {
    if requests <= 0 {
        return Ok(());
    }
    let row = w::table.filter(w::api_key_id.eq(key_id)).filter(w::window_start.eq(window_start));
    let clamped = diesel::update(row.filter(w::requests.lt(requests)))
        .set(w::requests.eq(0_i64))
        .execute(conn)?;
    if clamped == 0 {
        diesel::update(row.filter(w::requests.ge(requests)))
            .set(w::requests.eq(w::requests - requests))
            .execute(conn)?;
    }
    Ok(())
}

/// Deletes windows that started before `before` (Unix seconds).
///
/// # Errors
/// On database failure.
pub fn prune_before(conn: &mut DbConnection, before: i64) -> Result<usize, PersistenceError> {
    Ok(diesel::delete(w::table.filter(w::window_start.lt(before))).execute(conn)?)
}
