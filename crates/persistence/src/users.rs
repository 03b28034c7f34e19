//! Repository of `users`.

use crate::error::PersistenceError;
use crate::models::{from_utc, UserRecord, UserRow};
use crate::pool::DbConnection;
use crate::schema::users;
use aigw_domain::UserId;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// Inserts a new user.
///
/// # Errors
/// [`PersistenceError::Conflict`] when the e-mail is taken; others on database failure.
pub fn insert(conn: &mut DbConnection, user: &UserRow) -> Result<(), PersistenceError> {
    diesel::insert_into(users::table).values(UserRecord::from(user)).execute(conn)?;
    Ok(())
}

/// The user with normalised e-mail `email`, if any.
///
/// # Errors
/// On database failure.
pub fn find_by_email(
    conn: &mut DbConnection,
    email: &str,
) -> Result<Option<UserRow>, PersistenceError> {
    Ok(users::table
        .filter(users::email.eq(email))
        .select(UserRecord::as_select())
        .first(conn)
        .optional()?
        .map(UserRow::from))
}

/// The user with id `id`, if any.
///
/// # Errors
/// On database failure.
pub fn find_by_id(
    conn: &mut DbConnection,
    id: &UserId,
) -> Result<Option<UserRow>, PersistenceError> {
    let id = id.as_str();
    Ok(users::table
        .find(id)
        .select(UserRecord::as_select())
        .first(conn)
        .optional()?
        .map(UserRow::from))
}

/// The users with the given ids (those that exist, in no particular order); the caller
/// bounds how many ids it asks for.
///
/// # Errors
/// On database failure.
pub fn find_by_ids(
    conn: &mut DbConnection,
    ids: &[String],
) -> Result<Vec<UserRow>, PersistenceError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(users::table
        .filter(users::id.eq_any(ids.to_vec()))
        .select(UserRecord::as_select())
        .load(conn)?
        .into_iter()
        .map(UserRow::from)
        .collect())
}

/// Replaces a user's password hash (re-hashing with raised parameters) at `now` (UTC).
///
/// # Errors
/// On database failure.
pub fn update_password_hash(
    conn: &mut DbConnection,
    id: &UserId,
    password_hash: &str,
    now: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    let id = id.as_str();
    diesel::update(users::table.find(id))
        .set((users::password_hash.eq(password_hash), users::updated_at.eq(from_utc(now))))
        .execute(conn)?;
    Ok(())
}

/// Up to `limit` users, newest first (by id, a UUIDv7), after id `before` when given, whose
/// e-mail starts with `email_prefix` when given (compared literally: `%` and `_` are not
/// wildcards).
///
/// # Errors
/// On database failure.
pub fn list(
    conn: &mut DbConnection,
    email_prefix: Option<&str>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<UserRow>, PersistenceError> {
    let mut query = users::table.select(UserRecord::as_select()).into_boxed();
    if let Some(prefix) = email_prefix {
        let escaped = like_literal(prefix);
        query = query.filter(users::email.like(format!("{escaped}%")).escape('\\'));
    }
    if let Some(before) = before {
        query = query.filter(users::id.lt(before.to_owned()));
    }
    Ok(query
        .order(users::id.desc())
        .limit(limit)
        .load(conn)?
        .into_iter()
        .map(UserRow::from)
        .collect())
}

/// Sets the role and the disabled time of user `id` at `now` (UTC).
///
/// # Errors
/// On database failure.
pub fn update_access(
    conn: &mut DbConnection,
    id: &UserId,
    role: aigw_domain::Role,
    disabled_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    let id = id.as_str();
    diesel::update(users::table.find(id))
        .set((
            users::role.eq(role.as_str()),
            users::disabled_at.eq(disabled_at.map(from_utc)),
            users::updated_at.eq(from_utc(now)),
        ))
        .execute(conn)?;
    Ok(())
}

/// Sets user `id`'s own budget (micro-USD per the platform's user budget period; `None`: the
/// platform default applies) at `now` (UTC); returns whether the user exists.
///
/// # Errors
/// On database failure.
pub fn set_budget(
    conn: &mut DbConnection,
    id: &UserId,
    budget_micros: Option<i64>,
    now: DateTime<Utc>,
) -> Result<bool, PersistenceError> {
    let n = diesel::update(users::table.find(id.as_str()))
        .set((users::budget_micros.eq(budget_micros), users::updated_at.eq(from_utc(now))))
        .execute(conn)?;
    Ok(n == 1)
}

/// Whether user `id` exists and is enabled, holding the row's lock until the transaction ends
/// (a no-op update: on PostgreSQL it waits for a concurrent disable to commit and then sees
/// it; SQLite serialises writers anyway). A login inserts its session after this, so no
/// session can start for an account that a concurrent transaction is disabling.
///
/// # Errors
/// On database failure.
pub fn lock_if_enabled(conn: &mut DbConnection, id: &UserId) -> Result<bool, PersistenceError> {
    let id = id.as_str();
    let n = diesel::update(users::table.find(id).filter(users::disabled_at.is_null()))
        .set(users::disabled_at.eq(None::<chrono::NaiveDateTime>))
        .execute(conn)?;
    Ok(n == 1)
}

/// Locks the row of user `id` for the rest of the transaction (a no-op update) and says
/// whether it exists. Make it the transaction's first statement when the transaction reads
/// the user and then writes: SQLite then takes its write lock before reading (a read-then-write
/// transaction fails with "database is locked" when another writer got in between), and
/// PostgreSQL serialises concurrent changes of one user.
///
/// # Errors
/// On database failure.
pub fn lock(conn: &mut DbConnection, id: &UserId) -> Result<bool, PersistenceError> {
    let id = id.as_str();
    let n = diesel::update(users::table.find(id)).set(users::id.eq(users::id)).execute(conn)?;
    Ok(n == 1)
}

/// [`lock`] by normalised e-mail address.
///
/// # Errors
/// On database failure.
pub fn lock_by_email(conn: &mut DbConnection, email: &str) -> Result<bool, PersistenceError> {
    let n = diesel::update(users::table.filter(users::email.eq(email)))
        .set(users::id.eq(users::id))
        .execute(conn)?;
    Ok(n == 1)
}

/// Sets the display name of user `id` at `now` (UTC).
///
/// # Errors
/// On database failure.
pub fn update_name(
    conn: &mut DbConnection,
    id: &UserId,
    name: &str,
    now: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    let id = id.as_str();
    diesel::update(users::table.find(id))
        .set((users::name.eq(name), users::updated_at.eq(from_utc(now))))
        .execute(conn)?;
    Ok(())
}

/// What [`backfill_email_skeletons`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SkeletonBackfill {
    /// Rows that got their skeleton (and their address's normalised form, when it differed).
    pub filled: usize,
    /// Ids of the rows left without one, oldest first: their address (normalised) or its
    /// skeleton is an earlier row's. They keep working as before; a look-alike of them cannot
    /// register.
    pub colliding: Vec<String>,
}

/// Fills `email_skeleton` of the rows written before it existed, oldest first (ids are
/// UUIDv7), one statement per row and outside any transaction, so that a collision only
/// leaves that row as it was: its e-mail is rewritten to the normalised form
/// (`aigw_domain::normalize_email`) and its skeleton set, unless another row already has
/// either (then both stay and the id is reported). Rows that have a skeleton are not read.
/// Safe to run on several nodes at once: a row is only written while its skeleton is NULL.
///
/// # Errors
/// On database failure other than the collision.
pub fn backfill_email_skeletons(
    conn: &mut DbConnection,
) -> Result<SkeletonBackfill, PersistenceError> {
    let pending: Vec<(String, String)> = users::table
        .filter(users::email_skeleton.is_null())
        .select((users::id, users::email))
        .order(users::id.asc())
        .load(conn)?;
    let mut report = SkeletonBackfill::default();
    for (id, email) in pending {
        let normalized = aigw_domain::normalize_email(&email);
        let skeleton = aigw_domain::email_skeleton(&normalized);
        let written =
            diesel::update(users::table.find(&id).filter(users::email_skeleton.is_null()))
                .set((users::email.eq(&normalized), users::email_skeleton.eq(&skeleton)))
                .execute(conn);
        match written.map_err(PersistenceError::from) {
            Ok(_) => report.filled += 1,
            Err(PersistenceError::Conflict) => report.colliding.push(id),
            Err(other) => return Err(other),
        }
    }
    Ok(report)
}

/// Marks user `id`'s current address as verified at `at` (UTC), unless it already is.
///
/// # Errors
/// On database failure.
pub fn mark_email_verified(
    conn: &mut DbConnection,
    id: &UserId,
    at: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    let id = id.as_str();
    diesel::update(users::table.find(id).filter(users::email_verified_at.is_null()))
        .set((users::email_verified_at.eq(from_utc(at)), users::updated_at.eq(from_utc(at))))
        .execute(conn)?;
    Ok(())
}

/// Moves user `id` to the normalised address `email` (and its skeleton), verified at `at`
/// (UTC).
///
/// # Errors
/// [`PersistenceError::Conflict`] when another account has the address or a look-alike of it;
/// others on database failure.
pub fn change_email(
    conn: &mut DbConnection,
    id: &UserId,
    email: &str,
    at: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    let id = id.as_str();
    diesel::update(users::table.find(id))
        .set((
            users::email.eq(email),
            users::email_skeleton.eq(aigw_domain::email_skeleton(email)),
            users::email_verified_at.eq(from_utc(at)),
            users::updated_at.eq(from_utc(at)),
        ))
        .execute(conn)?;
    Ok(())
}

/// Whether an account other than `id` has the normalised address `email` or a look-alike of
/// it (the same UTS 39 skeleton).
///
/// # Errors
/// On database failure.
pub fn email_taken(
    conn: &mut DbConnection,
    email: &str,
    except_id: &UserId,
) -> Result<bool, PersistenceError> {
    let except_id = except_id.as_str();
    let skeleton = aigw_domain::email_skeleton(email);
    let n: i64 = users::table
        .filter(users::id.ne(except_id))
        .filter(users::email.eq(email).or(users::email_skeleton.eq(skeleton)))
        .count()
        .get_result(conn)?;
    Ok(n > 0)
}

/// `text` for a `LIKE` pattern with `ESCAPE '\'`: its `%`, `_` and backslashes match themselves.
pub(crate) fn like_literal(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c {
            '%' | '_' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect()
}
