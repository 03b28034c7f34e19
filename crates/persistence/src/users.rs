//! Repository of `users`.

use crate::error::PersistenceError;
use crate::models::{from_utc, UserRecord, UserRow};
use crate::pool::DbConnection;
use crate::schema::users;
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
pub fn find_by_id(conn: &mut DbConnection, id: &str) -> Result<Option<UserRow>, PersistenceError> {
    Ok(users::table
        .find(id)
        .select(UserRecord::as_select())
        .first(conn)
        .optional()?
        .map(UserRow::from))
}

/// Replaces a user's password hash (re-hashing with raised parameters) at `now` (UTC).
///
/// # Errors
/// On database failure.
pub fn update_password_hash(
    conn: &mut DbConnection,
    id: &str,
    password_hash: &str,
    now: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    diesel::update(users::table.find(id))
        .set((users::password_hash.eq(password_hash), users::updated_at.eq(from_utc(now))))
        .execute(conn)?;
    Ok(())
}
