//! Repository of `invitations`: single-use, per e-mail, expiring; stored by digest.

use crate::error::PersistenceError;
use crate::pool::DbConnection;
use crate::schema::invitations;
use aigw_domain::InvitationId;
use chrono::NaiveDateTime;
use diesel::prelude::*;

/// A row of `invitations`.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = invitations)]
pub struct InvitationRow {
    /// UUIDv7 string.
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub id: InvitationId,
    /// The normalised e-mail address the invitation is for.
    pub email: String,
    /// SHA-256 digest of the token.
    pub token_hash: String,
    /// The admin who created it.
    pub created_by: String,
    /// Creation time, UTC.
    pub created_at: NaiveDateTime,
    /// End of validity, UTC.
    pub expires_at: NaiveDateTime,
    /// When it was used to register, UTC.
    pub used_at: Option<NaiveDateTime>,
    /// When an admin revoked it, UTC.
    pub revoked_at: Option<NaiveDateTime>,
    /// When it was last e-mailed, UTC (`None`: never, no mailer).
    pub sent_at: Option<NaiveDateTime>,
    /// Times it was e-mailed.
    pub sends: i32,
}

/// Inserts an invitation.
///
/// # Errors
/// On database failure.
pub fn insert(conn: &mut DbConnection, row: &InvitationRow) -> Result<(), PersistenceError> {
    diesel::insert_into(invitations::table).values(row.clone()).execute(conn)?;
    Ok(())
}

/// Marks the unused, unexpired invitation with digest `token_hash` for `email` used at `now`.
/// Returns whether one was (false: unknown, used, expired, or for another e-mail). A
/// compare-and-set: of two registrations with one invitation, exactly one wins.
///
/// # Errors
/// On database failure.
pub fn consume(
    conn: &mut DbConnection,
    token_hash: &str,
    email: &str,
    now: NaiveDateTime,
) -> Result<bool, PersistenceError> {
    let n = diesel::update(
        invitations::table
            .filter(invitations::token_hash.eq(token_hash))
            .filter(invitations::email.eq(email))
            .filter(invitations::used_at.is_null())
            .filter(invitations::revoked_at.is_null())
            .filter(invitations::expires_at.gt(now)),
    )
    .set(invitations::used_at.eq(now))
    .execute(conn)?;
    Ok(n == 1)
}

/// Marks every open invitation (unused, unrevoked, unexpired at `now`) for `email` used at
/// `now`: the address registered without one (`auth.registration = "open"`). Returns how
/// many were.
///
/// # Errors
/// On database failure.
pub fn accept_for_email(
    conn: &mut DbConnection,
    email: &str,
    now: NaiveDateTime,
) -> Result<usize, PersistenceError> {
    Ok(diesel::update(
        invitations::table
            .filter(invitations::email.eq(email))
            .filter(invitations::used_at.is_null())
            .filter(invitations::revoked_at.is_null())
            .filter(invitations::expires_at.gt(now)),
    )
    .set(invitations::used_at.eq(now))
    .execute(conn)?)
}

/// Up to `limit` open invitations (unused, unrevoked, unexpired at `now`), newest first (by
/// id), after id `before` when given.
///
/// # Errors
/// On database failure.
pub fn list_open(
    conn: &mut DbConnection,
    now: NaiveDateTime,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<InvitationRow>, PersistenceError> {
    let mut query = invitations::table
        .filter(invitations::used_at.is_null())
        .filter(invitations::revoked_at.is_null())
        .filter(invitations::expires_at.gt(now))
        .select(InvitationRow::as_select())
        .into_boxed();
    if let Some(before) = before {
        query = query.filter(invitations::id.lt(before.to_owned()));
    }
    Ok(query.order(invitations::id.desc()).limit(limit).load(conn)?)
}

/// Up to `limit` invitations in every state (open, used, revoked, expired), newest first (by
/// id), after id `before` when given.
///
/// # Errors
/// On database failure.
pub fn list_all(
    conn: &mut DbConnection,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<InvitationRow>, PersistenceError> {
    let mut query = invitations::table.select(InvitationRow::as_select()).into_boxed();
    if let Some(before) = before {
        query = query.filter(invitations::id.lt(before.to_owned()));
    }
    Ok(query.order(invitations::id.desc()).limit(limit).load(conn)?)
}

/// Gives unused, unrevoked invitation `id` (expired or not) a new token digest and end of
/// validity at `now`, counting a send when `sent`; returns it as updated (`None`: no such
/// invitation, or used or revoked). The old token stops working with the same statement.
///
/// # Errors
/// On database failure.
pub fn renew(
    conn: &mut DbConnection,
    id: &InvitationId,
    token_hash: &str,
    expires_at: NaiveDateTime,
    sent_at: Option<NaiveDateTime>,
) -> Result<Option<InvitationRow>, PersistenceError> {
    let open = invitations::table
        .filter(invitations::id.eq(id.as_str()))
        .filter(invitations::used_at.is_null())
        .filter(invitations::revoked_at.is_null());
    let changed = match sent_at {
        Some(at) => diesel::update(open)
            .set((
                invitations::token_hash.eq(token_hash),
                invitations::expires_at.eq(expires_at),
                invitations::sent_at.eq(at),
                invitations::sends.eq(invitations::sends + 1),
            ))
            .execute(conn)?,
        None => diesel::update(open)
            .set((invitations::token_hash.eq(token_hash), invitations::expires_at.eq(expires_at)))
            .execute(conn)?,
    };
    if changed == 0 {
        return Ok(None);
    }
    Ok(Some(
        invitations::table
            .filter(invitations::id.eq(id.as_str()))
            .select(InvitationRow::as_select())
            .first(conn)?,
    ))
}

/// Revokes open invitation `id` at `now`; returns whether there was one (unused, unrevoked).
///
/// # Errors
/// On database failure.
pub fn revoke(
    conn: &mut DbConnection,
    id: &InvitationId,
    now: NaiveDateTime,
) -> Result<bool, PersistenceError> {
    let n = diesel::update(
        invitations::table
            .filter(invitations::id.eq(id.as_str()))
            .filter(invitations::used_at.is_null())
            .filter(invitations::revoked_at.is_null()),
    )
    .set(invitations::revoked_at.eq(now))
    .execute(conn)?;
    Ok(n == 1)
}
