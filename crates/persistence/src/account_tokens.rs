//! Repository of `account_tokens`: the single-use tokens sent to an account's address
//! (e-mail verification, e-mail change, password reset), stored as their SHA-256 digest.

use crate::error::PersistenceError;
use crate::models::{from_utc, to_utc};
use crate::pool::DbConnection;
use crate::schema::account_tokens;
use aigw_domain::account_token::TokenPurpose;
use aigw_domain::{AccountTokenId, UserId};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

/// A token as stored (without its digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountTokenRow {
    /// UUIDv7 string.
    pub id: AccountTokenId,
    /// The account the token belongs to.
    pub user_id: UserId,
    /// What redeeming it does.
    pub purpose: TokenPurpose,
    /// The address the token was sent to: the account's when it was issued (`verify_email`,
    /// `reset_password`: the token is void once the account has another), the new one
    /// (`change_email`).
    pub email: String,
    /// When it was issued, UTC.
    pub created_at: DateTime<Utc>,
    /// When it stops working, UTC.
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = account_tokens)]
struct AccountTokenRecord {
    id: String,
    user_id: String,
    purpose: String,
    digest: String,
    email: String,
    created_at: NaiveDateTime,
    expires_at: NaiveDateTime,
    used_at: Option<NaiveDateTime>,
}

impl AccountTokenRecord {
    fn into_row(self) -> Option<AccountTokenRow> {
        Some(AccountTokenRow {
            purpose: TokenPurpose::from_stored(&self.purpose)?,
            id: AccountTokenId::from(self.id),
            user_id: UserId::from(self.user_id),
            email: self.email,
            created_at: to_utc(self.created_at),
            expires_at: to_utc(self.expires_at),
        })
    }
}

/// Stores `token` under `digest` (hex SHA-256 of the token).
///
/// # Errors
/// [`PersistenceError::Conflict`] when the digest exists (a 262-bit collision: never in
/// practice); others on database failure.
pub fn insert(
    conn: &mut DbConnection,
    token: &AccountTokenRow,
    digest: &str,
) -> Result<(), PersistenceError> {
    let record = AccountTokenRecord {
        id: token.id.to_string(),
        user_id: token.user_id.to_string(),
        purpose: token.purpose.as_str().to_owned(),
        digest: digest.to_owned(),
        email: token.email.clone(),
        created_at: from_utc(token.created_at),
        expires_at: from_utc(token.expires_at),
        used_at: None,
    };
    diesel::insert_into(account_tokens::table).values(record).execute(conn)?;
    Ok(())
}

/// Redeems the token with digest `digest` if it is of one of `purposes`, unused and not
/// expired at `now`: marks it used and returns it. A compare-and-set: of two concurrent
/// redemptions (on any nodes) exactly one gets the row. Call it inside a transaction: the
/// row is read back after the update.
///
/// # Errors
/// On database failure.
pub fn redeem(
    conn: &mut DbConnection,
    digest: &str,
    purposes: &[TokenPurpose],
    now: DateTime<Utc>,
) -> Result<Option<AccountTokenRow>, PersistenceError> {
    let at = from_utc(now);
    let stored: Vec<&str> = purposes.iter().map(|p| p.as_str()).collect();
    let n = diesel::update(
        account_tokens::table
            .filter(account_tokens::digest.eq(digest))
            .filter(account_tokens::purpose.eq_any(stored))
            .filter(account_tokens::used_at.is_null())
            .filter(account_tokens::expires_at.gt(at)),
    )
    .set(account_tokens::used_at.eq(at))
    .execute(conn)?;
    if n != 1 {
        return Ok(None);
    }
    let record = account_tokens::table
        .filter(account_tokens::digest.eq(digest))
        .select(AccountTokenRecord::as_select())
        .first(conn)
        .optional()?;
    Ok(record.and_then(AccountTokenRecord::into_row))
}

/// The token with digest `digest` if it is of one of `purposes`, unused and not expired at
/// `now` (a read: [`redeem`] is the compare-and-set).
///
/// # Errors
/// On database failure.
pub fn find_valid(
    conn: &mut DbConnection,
    digest: &str,
    purposes: &[TokenPurpose],
    now: DateTime<Utc>,
) -> Result<Option<AccountTokenRow>, PersistenceError> {
    let stored: Vec<&str> = purposes.iter().map(|p| p.as_str()).collect();
    let record = account_tokens::table
        .filter(account_tokens::digest.eq(digest))
        .filter(account_tokens::purpose.eq_any(stored))
        .filter(account_tokens::used_at.is_null())
        .filter(account_tokens::expires_at.gt(from_utc(now)))
        .select(AccountTokenRecord::as_select())
        .first(conn)
        .optional()?;
    Ok(record.and_then(AccountTokenRecord::into_row))
}

/// Withdraws every unused token of user `user_id` of one of `purposes` (marks them used at
/// `now`); returns how many.
///
/// # Errors
/// On database failure.
pub fn withdraw(
    conn: &mut DbConnection,
    user_id: &UserId,
    purposes: &[TokenPurpose],
    now: DateTime<Utc>,
) -> Result<usize, PersistenceError> {
    let user_id = user_id.as_str();
    let stored: Vec<&str> = purposes.iter().map(|p| p.as_str()).collect();
    Ok(diesel::update(
        account_tokens::table
            .filter(account_tokens::user_id.eq(user_id))
            .filter(account_tokens::purpose.eq_any(stored))
            .filter(account_tokens::used_at.is_null()),
    )
    .set(account_tokens::used_at.eq(from_utc(now)))
    .execute(conn)?)
}

/// Deletes the tokens that expired before `before`; returns how many.
///
/// # Errors
/// On database failure.
pub fn prune_expired_before(
    conn: &mut DbConnection,
    before: DateTime<Utc>,
) -> Result<usize, PersistenceError> {
    Ok(diesel::delete(
        account_tokens::table.filter(account_tokens::expires_at.lt(from_utc(before))),
    )
    .execute(conn)?)
}
