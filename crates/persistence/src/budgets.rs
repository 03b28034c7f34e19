//! Budget counters (`key_budget_periods`): per counter (an API key's, a team's or a member's:
//! [`CounterSubject`]) and budget period, the micro-USD committed, i.e. settled spend plus the
//! worst-case cost of calls still running. Functions name a counter `key_id` for its column;
//! it holds any [`CounterSubject::name`].
//!
//! A reservation is one conditional `UPDATE … SET committed = committed + cost WHERE
//! committed + cost <= limit`: the database evaluates the condition and the increment under
//! the row's write lock (PostgreSQL re-checks the `WHERE` on the locked row version; SQLite
//! has one writer), so concurrent calls on any number of nodes sharing the database can never
//! commit more than the limit together.

use crate::error::PersistenceError;
use crate::pool::DbConnection;
use crate::schema::{key_budget_periods as b, usage_daily};
use aigw_domain::CounterSubject;
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::BigInt;

/// The outcome of [`reserve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// Reserved; micro-USD committed now, this reservation included.
    Yes(i64),
    /// Refused: the reservation would pass the limit; micro-USD committed now.
    No(i64),
    /// The period has no counter yet: call [`open_period`] and retry.
    NoCounter,
}

/// Reserves `cost` micro-USD of key `key_id`'s `period` against `limit`.
///
/// # Errors
/// On database failure.
pub fn reserve(
    conn: &mut DbConnection,
    key_id: &str,
    period: &str,
    cost: i64,
    limit: i64,
) -> Result<Reserved, PersistenceError> {
    let filter = b::table.filter(b::api_key_id.eq(key_id)).filter(b::period.eq(period));
    // Saturating: a worst case near `i64::MAX` (an enormous `max_tokens`) must be refused
    // here, not overflow; the update then never adds past `limit`.
    let changed = diesel::update(filter.filter(b::committed_micros.le(limit.saturating_sub(cost))))
        .set(b::committed_micros.eq(b::committed_micros + cost))
        .execute(conn)?;
    let committed: Option<i64> = filter.select(b::committed_micros).first(conn).optional()?;
    Ok(match (changed, committed) {
        (1, Some(now)) => Reserved::Yes(now),
        (_, Some(now)) => Reserved::No(now),
        (_, None) => Reserved::NoCounter,
    })
}

/// Creates the counter of key `key_id`'s `period` at `initial` micro-USD, unless another
/// caller created it first (then it is left alone).
///
/// # Errors
/// On database failure.
pub fn open_period(
    conn: &mut DbConnection,
    key_id: &str,
    period: &str,
    initial: i64,
) -> Result<(), PersistenceError> {
    let row = (b::api_key_id.eq(key_id), b::period.eq(period), b::committed_micros.eq(initial));
    match conn {
        DbConnection::Postgres(c) => {
            diesel::insert_into(b::table).values(row).on_conflict_do_nothing().execute(c)?
        }
        DbConnection::Sqlite(c) => {
            diesel::insert_into(b::table).values(row).on_conflict_do_nothing().execute(c)?
        }
    };
    Ok(())
}

/// Adds `delta` micro-USD (negative: a reservation settled below its worst case) to the
/// counter of key `key_id`'s `period`, never below 0. A missing counter is left missing.
///
/// # Errors
/// On database failure.
pub fn settle(
    conn: &mut DbConnection,
    key_id: &str,
    period: &str,
    delta: i64,
) -> Result<(), PersistenceError> {
    if delta == 0 {
        return Ok(());
    }
    let filter = b::table.filter(b::api_key_id.eq(key_id)).filter(b::period.eq(period));
    if delta > 0 {
        diesel::update(filter)
            .set(b::committed_micros.eq(b::committed_micros + delta))
            .execute(conn)?;
    } else {
        // committed = max(committed + delta, 0), portable to both backends: the clamp first,
        // so that the subtraction cannot be clamped a second time.
        let clamped = diesel::update(filter.filter(b::committed_micros.lt(-delta)))
            .set(b::committed_micros.eq(0_i64))
            .execute(conn)?;
        if clamped == 0 {
            diesel::update(filter.filter(b::committed_micros.ge(-delta)))
                .set(b::committed_micros.eq(b::committed_micros + delta))
                .execute(conn)?;
        }
    }
    Ok(())
}

/// Where budget counter `counter` opens (a key's, a team's or a member's, named as
/// [`CounterSubject::name`] writes): what it has spent from UTC day `from` (`YYYY-MM-DD`,
/// inclusive) on, from the daily rollups, plus the reservations of its calls in flight
/// ([`crate::in_flight::reserved_for`]), in micro-USD.
///
/// The calls in flight are read first: a call's usage is added to the rollups in the
/// transaction that deletes its row in `calls_in_flight`, so a call whose flush commits
/// between the two reads is counted twice (refusing early at worst), never missed.
///
/// # Errors
/// On database failure.
pub fn committed_since(
    conn: &mut DbConnection,
    counter: &str,
    from: &str,
) -> Result<i64, PersistenceError> {
    let subject = CounterSubject::parse(counter);
    let in_flight = crate::in_flight::reserved_for(conn, subject)?;
    Ok(in_flight.saturating_add(ledger_spend_since(conn, subject, from)?))
}

/// What `subject` (a key, a team, a member of a team or a user) has spent from UTC day `from`
/// (`YYYY-MM-DD`, inclusive) on, in micro-USD, from the daily rollups.
///
/// # Errors
/// On database failure.
pub fn ledger_spend_since(
    conn: &mut DbConnection,
    subject: CounterSubject<'_>,
    from: &str,
) -> Result<i64, PersistenceError> {
    use usage_daily::dsl as d;
    let sum = sql::<diesel::sql_types::Nullable<BigInt>>("CAST(SUM(cost_micros) AS BIGINT)");
    let since = d::usage_daily.filter(d::day.ge(from));
    let spent: Option<i64> = match subject {
        CounterSubject::Key(key_id) => {
            since.filter(d::api_key_id.eq(key_id)).select(sum).first(conn)?
        }
        CounterSubject::Team(team_id) => {
            since.filter(d::team_id.eq(team_id)).select(sum).first(conn)?
        }
        CounterSubject::Member { team_id, user_id } => since
            .filter(d::team_id.eq(team_id))
            .filter(d::member_id.eq(user_id))
            .select(sum)
            .first(conn)?,
        // Every key of the user but team keys (scoped to a team, with no member).
        CounterSubject::User(user_id) => since
            .filter(d::user_id.eq(user_id))
            .filter(d::team_id.is_null().or(d::member_id.is_not_null()))
            .select(sum)
            .first(conn)?,
    };
    Ok(spent.unwrap_or(0))
}

/// Drops every counter of key `key_id` (its budget or period changed, or it was deleted): the
/// next reservation reopens the period from the ledger.
///
/// # Errors
/// On database failure.
pub fn forget(conn: &mut DbConnection, key_id: &str) -> Result<(), PersistenceError> {
    diesel::delete(b::table.filter(b::api_key_id.eq(key_id))).execute(conn)?;
    Ok(())
}

/// Drops every counter of key `key_id` but the one of `period` (its budget period changed:
/// the next reservation opens the new period from the ledger, while a counter of the same
/// first day counts the same spend and running calls).
///
/// # Errors
/// On database failure.
pub fn forget_except(
    conn: &mut DbConnection,
    key_id: &str,
    period: &str,
) -> Result<(), PersistenceError> {
    diesel::delete(b::table.filter(b::api_key_id.eq(key_id)).filter(b::period.ne(period)))
        .execute(conn)?;
    Ok(())
}

/// Every counter whose period name starts with `prefix` (no `%` or `_` in it), as
/// `(api_key_id, period)` pairs.
///
/// # Errors
/// On database failure.
pub fn periods_starting_with(
    conn: &mut DbConnection,
    prefix: &str,
) -> Result<Vec<(String, String)>, PersistenceError> {
    Ok(b::table
        .filter(b::period.like(format!("{prefix}%")))
        .select((b::api_key_id, b::period))
        .load(conn)?)
}

/// Drops the counter of key `key_id`'s `period`.
///
/// # Errors
/// On database failure.
pub fn forget_period(
    conn: &mut DbConnection,
    key_id: &str,
    period: &str,
) -> Result<(), PersistenceError> {
    diesel::delete(b::table.filter(b::api_key_id.eq(key_id)).filter(b::period.eq(period)))
        .execute(conn)?;
    Ok(())
}

/// Drops every member counter of team `team_id` but those of `period` (the team's budget
/// period changed).
///
/// # Errors
/// On database failure.
pub fn forget_members_except(
    conn: &mut DbConnection,
    team_id: &str,
    period: &str,
) -> Result<(), PersistenceError> {
    // Team ids are UUIDs: no `%` or `_` to escape.
    let members = format!("member:{team_id}:%");
    diesel::delete(b::table.filter(b::api_key_id.like(members)).filter(b::period.ne(period)))
        .execute(conn)?;
    Ok(())
}
