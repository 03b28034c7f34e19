//! Repository of `api_keys`. Every read and change by key id is scoped to its owner
//! ([`KeyOwner`]: a user for their own keys, a team for its team keys), so another owner's key
//! is indistinguishable from a missing one.

use crate::error::PersistenceError;
use crate::models::{from_utc, ApiKeyChanges, ApiKeyChangeset, ApiKeyRecord, ApiKeyRow};
use crate::pool::DbConnection;
use crate::schema::api_keys;
use aigw_domain::{ApiKeyId, TeamId, UserId};
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// Who a key belongs to, for reads and changes by key id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOwner<'a> {
    /// A user's own keys (team-scoped or not), by user id; never a team key.
    User(&'a str),
    /// A team's team keys, by team id.
    Team(&'a str),
}

/// Applies `owner`'s filter to a boxed query or statement on `api_keys`.
macro_rules! owned_by {
    ($query:expr, $owner:expr) => {
        match $owner {
            KeyOwner::User(user) => $query
                .filter(api_keys::user_id.eq(user.to_owned()))
                .filter(api_keys::team_owned.eq(false)),
            KeyOwner::Team(team) => $query
                .filter(api_keys::team_id.eq(team.to_owned()))
                .filter(api_keys::team_owned.eq(true)),
        }
    };
}

/// Inserts a key.
///
/// # Errors
/// [`PersistenceError::Conflict`] on a digest collision; others on database failure.
pub fn insert(conn: &mut DbConnection, row: &ApiKeyRow) -> Result<(), PersistenceError> {
    diesel::insert_into(api_keys::table).values(ApiKeyRecord::from(row)).execute(conn)?;
    Ok(())
}

/// The keys of `user_id`, newest first.
///
/// # Errors
/// On database failure.
pub fn list_for_user(
    conn: &mut DbConnection,
    user_id: &UserId,
) -> Result<Vec<ApiKeyRow>, PersistenceError> {
    let user_id = user_id.as_str();
    Ok(api_keys::table
        .filter(api_keys::user_id.eq(user_id))
        .filter(api_keys::team_owned.eq(false))
        .order(api_keys::id.desc())
        .select(ApiKeyRecord::as_select())
        .load(conn)?
        .into_iter()
        .map(ApiKeyRow::from)
        .collect())
}

/// The key whose current secret, or whose secret replaced by the last rotation, has digest
/// `key_hash`, if any (its owner exists: `user_id` is a cascading foreign key). Compare
/// `key_hash` with the row's to tell which.
///
/// # Errors
/// On database failure.
pub fn find_by_hash(
    conn: &mut DbConnection,
    key_hash: &str,
) -> Result<Option<ApiKeyRow>, PersistenceError> {
    Ok(api_keys::table
        .filter(api_keys::key_hash.eq(key_hash).or(api_keys::previous_key_hash.eq(key_hash)))
        .select(ApiKeyRecord::as_select())
        .first(conn)
        .optional()?
        .map(ApiKeyRow::from))
}

/// Key `id`, whoever owns it.
///
/// # Errors
/// On database failure.
pub fn find(conn: &mut DbConnection, id: &ApiKeyId) -> Result<Option<ApiKeyRow>, PersistenceError> {
    Ok(api_keys::table
        .filter(api_keys::id.eq(id.as_str()))
        .select(ApiKeyRecord::as_select())
        .first(conn)
        .optional()?
        .map(ApiKeyRow::from))
}

/// The names and visible prefixes of the keys with ids `ids` that exist, deleted ones
/// excepted: `(id, name, key_prefix)`.
///
/// # Errors
/// On database failure.
pub fn names_of(
    conn: &mut DbConnection,
    ids: &[String],
) -> Result<Vec<(String, String, String)>, PersistenceError> {
    let mut found = Vec::new();
    for chunk in ids.chunks(500) {
        let rows: Vec<(String, String, String)> = api_keys::table
            .filter(api_keys::id.eq_any(chunk.to_vec()))
            .select((api_keys::id, api_keys::name, api_keys::key_prefix))
            .load(conn)?;
        found.extend(rows);
    }
    Ok(found)
}

/// Key `id` of `owner`, if it has it.
///
/// # Errors
/// On database failure.
pub fn find_for(
    conn: &mut DbConnection,
    id: &ApiKeyId,
    owner: KeyOwner<'_>,
) -> Result<Option<ApiKeyRow>, PersistenceError> {
    let id = id.as_str();
    let query = api_keys::table.filter(api_keys::id.eq(id.to_owned())).into_boxed();
    Ok(owned_by!(query, owner)
        .select(ApiKeyRecord::as_select())
        .first(conn)
        .optional()?
        .map(ApiKeyRow::from))
}

/// Up to `limit` keys of `owner` (a user's own keys, or a team's team keys), newest first (by
/// id), after id `before` when given. Served by the indexes on `(user_id, id)` and
/// `(team_id, id)`, so a page costs the same whatever the number of keys.
///
/// # Errors
/// On database failure.
pub fn page_for(
    conn: &mut DbConnection,
    owner: KeyOwner<'_>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<ApiKeyRow>, PersistenceError> {
    let mut query = owned_by!(api_keys::table.into_boxed(), owner);
    if let Some(before) = before {
        query = query.filter(api_keys::id.lt(before.to_owned()));
    }
    Ok(query
        .order(api_keys::id.desc())
        .limit(limit)
        .select(ApiKeyRecord::as_select())
        .load(conn)?
        .into_iter()
        .map(ApiKeyRow::from)
        .collect())
}

/// Revokes at `now` every unrevoked key scoped to team `team_id` (its team keys and its
/// members' team-scoped keys) and returns how many.
///
/// # Errors
/// On database failure.
pub fn revoke_team_keys(
    conn: &mut DbConnection,
    team_id: &TeamId,
    now: DateTime<Utc>,
) -> Result<usize, PersistenceError> {
    let team_id = team_id.as_str();
    let live = api_keys::table
        .filter(api_keys::team_id.eq(team_id))
        .filter(api_keys::revoked_at.is_null());
    Ok(diesel::update(live).set(api_keys::revoked_at.eq(from_utc(now))).execute(conn)?)
}

/// Applies `changes` to key `id` of `owner` and returns the key as it now is; `None` when
/// it has no such key. Call inside a transaction.
///
/// # Errors
/// On database failure.
pub fn update(
    conn: &mut DbConnection,
    id: &ApiKeyId,
    owner: KeyOwner<'_>,
    changes: &ApiKeyChanges,
) -> Result<Option<ApiKeyRow>, PersistenceError> {
    if !changes.is_empty() {
        let statement =
            diesel::update(api_keys::table.filter(api_keys::id.eq(id.as_str()))).into_boxed();
        owned_by!(statement, owner).set(ApiKeyChangeset::from(changes)).execute(conn)?;
    }
    find_for(conn, id, owner)
}

/// Replaces the secret of key `id` of `owner` (not revoked): the current digest becomes the
/// previous one, valid until `previous_expires_at`, and `key_prefix` / `key_hash` take the new
/// secret's. An older previous secret is dropped at once. Returns whether a key was changed
/// (`false`: no such key of that user, or it is revoked). A write first, so on SQLite the
/// transaction it opens takes the write lock up front (see `pool::transaction`).
///
/// # Errors
/// [`PersistenceError::Conflict`] on a digest collision; others on database failure.
pub fn rotate(
    conn: &mut DbConnection,
    id: &ApiKeyId,
    owner: KeyOwner<'_>,
    key_prefix: &str,
    key_hash: &str,
    previous_expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<bool, PersistenceError> {
    let id = id.as_str();
    let statement = diesel::update(
        api_keys::table.filter(api_keys::id.eq(id)).filter(api_keys::revoked_at.is_null()),
    )
    .into_boxed();
    let n = owned_by!(statement, owner)
        .set((
            api_keys::previous_key_hash.eq(api_keys::key_hash.nullable()),
            api_keys::previous_key_expires_at.eq(from_utc(previous_expires_at)),
            api_keys::key_prefix.eq(key_prefix),
            api_keys::key_hash.eq(key_hash),
            api_keys::rotated_at.eq(from_utc(now)),
        ))
        .execute(conn)?;
    Ok(n == 1)
}

/// Revokes key `id` of `owner` at `now` (keeping an earlier revocation time) and returns it;
/// `None` when there is no such key. `owner` is `None` only for an administrator's revocation
/// of any user's key.
///
/// # Errors
/// On database failure.
pub fn revoke(
    conn: &mut DbConnection,
    id: &ApiKeyId,
    owner: Option<KeyOwner<'_>>,
    now: DateTime<Utc>,
) -> Result<Option<ApiKeyRow>, PersistenceError> {
    let id = id.as_str();
    conn.transaction(|conn| {
        let mut update = diesel::update(
            api_keys::table.filter(api_keys::id.eq(id)).filter(api_keys::revoked_at.is_null()),
        )
        .into_boxed();
        let mut read = api_keys::table.filter(api_keys::id.eq(id)).into_boxed();
        if let Some(owner) = owner {
            update = owned_by!(update, owner);
            read = owned_by!(read, owner);
        }
        update.set(api_keys::revoked_at.eq(from_utc(now))).execute(conn)?;
        Ok(read.select(ApiKeyRecord::as_select()).first(conn).optional()?.map(ApiKeyRow::from))
    })
}

/// Up to `limit` keys of every user (of `owner` when given; whose `key_prefix` starts with
/// `key_prefix` when given), newest first (by id), after id `before` when given.
///
/// The prefix is a range, `key_prefix >= p AND key_prefix < p || U+10FFFF`, compared byte by
/// byte (SQLite's BINARY collation; `COLLATE "C"` on PostgreSQL, whatever the database's
/// collation), so the index `api_keys (key_prefix, id)` serves it and the case of base62 is
/// kept. (A prefix followed by U+10FFFF itself would fall outside; key prefixes are ASCII.)
///
/// # Errors
/// On database failure.
pub fn list_all(
    conn: &mut DbConnection,
    owner: Option<&str>,
    key_prefix: Option<&str>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<ApiKeyRow>, PersistenceError> {
    use diesel::dsl::sql;
    use diesel::sql_types::{Bool, Text};
    let mut query = api_keys::table.select(ApiKeyRecord::as_select()).into_boxed();
    if let Some(owner) = owner {
        query = query.filter(api_keys::user_id.eq(owner.to_owned()));
    }
    if let Some(prefix) = key_prefix {
        let (low, high) = (prefix.to_owned(), format!("{prefix}{}", char::MAX));
        query = match conn {
            DbConnection::Postgres(_) => query.filter(
                sql::<Bool>("api_keys.key_prefix COLLATE \"C\" >= ")
                    .bind::<Text, _>(low)
                    .sql(" AND api_keys.key_prefix COLLATE \"C\" < ")
                    .bind::<Text, _>(high),
            ),
            DbConnection::Sqlite(_) => {
                query.filter(api_keys::key_prefix.ge(low).and(api_keys::key_prefix.lt(high)))
            }
        };
    }
    if let Some(before) = before {
        query = query.filter(api_keys::id.lt(before.to_owned()));
    }
    Ok(query
        .order(api_keys::id.desc())
        .limit(limit)
        .load(conn)?
        .into_iter()
        .map(ApiKeyRow::from)
        .collect())
}

/// Deletes key `id` of `owner`. Returns whether it existed.
///
/// # Errors
/// On database failure.
pub fn delete(
    conn: &mut DbConnection,
    id: &ApiKeyId,
    owner: KeyOwner<'_>,
) -> Result<bool, PersistenceError> {
    let id = id.as_str();
    let statement = diesel::delete(api_keys::table.filter(api_keys::id.eq(id))).into_boxed();
    let n = owned_by!(statement, owner).execute(conn)?;
    Ok(n == 1)
}

/// Records a use of key `id` at `now`, unless one was recorded at or after `not_before`
/// (so a busy key costs one write a minute, not one per request).
///
/// # Errors
/// On database failure.
pub fn touch_last_used(
    conn: &mut DbConnection,
    id: &ApiKeyId,
    now: DateTime<Utc>,
    not_before: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    let id = id.as_str();
    let not_before = from_utc(not_before);
    diesel::update(
        api_keys::table
            .filter(api_keys::id.eq(id))
            .filter(api_keys::last_used_at.is_null().or(api_keys::last_used_at.lt(not_before))),
    )
    .set(api_keys::last_used_at.eq(from_utc(now)))
    .execute(conn)?;
    Ok(())
}
