//! Repositories of `sso_identities` (which account a provider's subject signs in to),
//! `sso_states` (the `state` of every sign-in that came back, so that a replayed callback is
//! refused), `sso_memberships` (the team memberships group rules granted) and
//! `sso_rule_teams` (the team a rule naming a team stands for) and `sso_codes` (one-time codes
//! of sign-ins that end in a single-page application).

use crate::error::PersistenceError;
use crate::models::{from_utc, to_utc};
use crate::pool::DbConnection;
use crate::schema::{
    sso_codes as c, sso_identities as i, sso_memberships as g, sso_rule_teams as r, sso_states as s,
};
use aigw_domain::{TeamId, TeamRole, UserId};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

/// A provider's subject and the account it signs in to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsoIdentityRow {
    /// The provider's id in the configuration (`sso.providers[].id`).
    pub provider: String,
    /// The provider's stable id of the person (the ID token's `sub`).
    pub subject: String,
    /// The account.
    pub user_id: UserId,
    /// The address the provider last asserted.
    pub email: Option<String>,
    /// First sign-in, UTC.
    pub created_at: DateTime<Utc>,
    /// Latest sign-in, UTC.
    pub last_sign_in_at: DateTime<Utc>,
    /// Whether the provider's admin groups made the account a platform admin.
    pub granted_admin: bool,
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = i)]
struct IdentityRecord {
    provider: String,
    subject: String,
    user_id: String,
    email: Option<String>,
    created_at: NaiveDateTime,
    last_sign_in_at: NaiveDateTime,
    granted_admin: bool,
}

impl From<IdentityRecord> for SsoIdentityRow {
    fn from(r: IdentityRecord) -> Self {
        Self {
            provider: r.provider,
            subject: r.subject,
            user_id: UserId::from(r.user_id),
            email: r.email,
            created_at: to_utc(r.created_at),
            last_sign_in_at: to_utc(r.last_sign_in_at),
            granted_admin: r.granted_admin,
        }
    }
}

/// The identity of `subject` at `provider`, if it signed in before.
///
/// # Errors
/// On database failure.
pub fn find(
    conn: &mut DbConnection,
    provider: &str,
    subject: &str,
) -> Result<Option<SsoIdentityRow>, PersistenceError> {
    let found = i::table
        .filter(i::provider.eq(provider))
        .filter(i::subject.eq(subject))
        .select(IdentityRecord::as_select())
        .first(conn)
        .optional()?;
    Ok(found.map(Into::into))
}

/// Records `row` (a first sign-in).
///
/// # Errors
/// [`PersistenceError::Conflict`] when the subject has an identity already (a concurrent
/// first sign-in); on database failure.
pub fn insert(conn: &mut DbConnection, row: &SsoIdentityRow) -> Result<(), PersistenceError> {
    let record = IdentityRecord {
        provider: row.provider.clone(),
        subject: row.subject.clone(),
        user_id: row.user_id.to_string(),
        email: row.email.clone(),
        created_at: from_utc(row.created_at),
        last_sign_in_at: from_utc(row.last_sign_in_at),
        granted_admin: row.granted_admin,
    };
    diesel::insert_into(i::table).values(&record).execute(conn)?;
    Ok(())
}

/// Records a sign-in of `subject` at `provider` at `now` with the address it asserted.
///
/// # Errors
/// On database failure.
pub fn touch(
    conn: &mut DbConnection,
    provider: &str,
    subject: &str,
    email: Option<&str>,
    now: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    diesel::update(i::table.filter(i::provider.eq(provider)).filter(i::subject.eq(subject)))
        .set((i::email.eq(email), i::last_sign_in_at.eq(from_utc(now))))
        .execute(conn)?;
    Ok(())
}

/// Records whether the provider's admin groups made `subject`'s account a platform admin.
///
/// # Errors
/// On database failure.
pub fn set_granted_admin(
    conn: &mut DbConnection,
    provider: &str,
    subject: &str,
    granted: bool,
) -> Result<(), PersistenceError> {
    diesel::update(i::table.filter(i::provider.eq(provider)).filter(i::subject.eq(subject)))
        .set(i::granted_admin.eq(granted))
        .execute(conn)?;
    Ok(())
}

/// Claims a sign-in's `state` (by digest) at `now`: `false` when it was claimed before (the
/// callback is a replay). A compare-and-set: of two returns with one state, one wins.
///
/// # Errors
/// On database failure.
pub fn claim_state(
    conn: &mut DbConnection,
    state_hash: &str,
    now: DateTime<Utc>,
) -> Result<bool, PersistenceError> {
    let inserted = diesel::insert_into(s::table)
        .values((s::state_hash.eq(state_hash), s::created_at.eq(from_utc(now))))
        .execute(conn);
    match inserted {
        Ok(_) => Ok(true),
        Err(e) => match PersistenceError::from(e) {
            PersistenceError::Conflict => Ok(false),
            other => Err(other),
        },
    }
}

/// Deletes the states claimed before `before` (their sign-ins have expired, so a replay is
/// refused by its expiry); returns how many.
///
/// # Errors
/// On database failure.
pub fn prune_states(
    conn: &mut DbConnection,
    before: DateTime<Utc>,
) -> Result<usize, PersistenceError> {
    Ok(diesel::delete(s::table.filter(s::created_at.lt(from_utc(before)))).execute(conn)?)
}

/// The memberships `provider`'s rules granted `user_id`: team and role.
///
/// # Errors
/// On database failure, or a stored role that is not one.
pub fn granted(
    conn: &mut DbConnection,
    provider: &str,
    user_id: &UserId,
) -> Result<Vec<(TeamId, TeamRole)>, PersistenceError> {
    let rows: Vec<(String, String)> = g::table
        .filter(g::provider.eq(provider))
        .filter(g::user_id.eq(user_id.as_str()))
        .select((g::team_id, g::role))
        .load(conn)?;
    rows.into_iter()
        .map(|(team, role)| {
            let role = TeamRole::parse(&role, "role").map_err(|_| {
                let why = format!("sso_memberships.role {role:?} is not a team role");
                PersistenceError::Query(diesel::result::Error::DeserializationError(why.into()))
            })?;
            Ok((TeamId::from(team), role))
        })
        .collect()
}

/// Records that `provider`'s rules grant `user_id` `role` in `team_id` (replacing the role
/// recorded before).
///
/// # Errors
/// On database failure.
pub fn grant(
    conn: &mut DbConnection,
    provider: &str,
    user_id: &UserId,
    team_id: &TeamId,
    role: TeamRole,
) -> Result<(), PersistenceError> {
    forget(conn, provider, user_id, team_id)?;
    diesel::insert_into(g::table)
        .values((
            g::provider.eq(provider),
            g::user_id.eq(user_id.as_str()),
            g::team_id.eq(team_id.as_str()),
            g::role.eq(role.as_str()),
        ))
        .execute(conn)?;
    Ok(())
}

/// Forgets that `provider`'s rules granted `user_id` a membership of `team_id`.
///
/// # Errors
/// On database failure.
pub fn forget(
    conn: &mut DbConnection,
    provider: &str,
    user_id: &UserId,
    team_id: &TeamId,
) -> Result<(), PersistenceError> {
    diesel::delete(
        g::table
            .filter(g::provider.eq(provider))
            .filter(g::user_id.eq(user_id.as_str()))
            .filter(g::team_id.eq(team_id.as_str())),
    )
    .execute(conn)?;
    Ok(())
}

/// The team `provider`'s rules naming team `name` stand for, if settled before.
///
/// # Errors
/// On database failure.
pub fn rule_team(
    conn: &mut DbConnection,
    provider: &str,
    name: &str,
) -> Result<Option<TeamId>, PersistenceError> {
    let found: Option<String> = r::table
        .filter(r::provider.eq(provider))
        .filter(r::team_name.eq(name))
        .select(r::team_id)
        .first(conn)
        .optional()?;
    Ok(found.map(TeamId::from))
}

/// Settles that `provider`'s rules naming team `name` stand for `team_id`.
///
/// # Errors
/// [`PersistenceError::Conflict`] when they stand for a team already (settled by a concurrent
/// sign-in: read it with [`rule_team`], outside the failed transaction); on database failure.
pub fn settle_rule_team(
    conn: &mut DbConnection,
    provider: &str,
    name: &str,
    team_id: &TeamId,
) -> Result<(), PersistenceError> {
    diesel::insert_into(r::table)
        .values((r::provider.eq(provider), r::team_name.eq(name), r::team_id.eq(team_id.as_str())))
        .execute(conn)?;
    Ok(())
}

/// Forgets the team `provider`'s rules naming team `name` stood for (it was deleted).
///
/// # Errors
/// On database failure.
pub fn forget_rule_team(
    conn: &mut DbConnection,
    provider: &str,
    name: &str,
) -> Result<(), PersistenceError> {
    diesel::delete(r::table.filter(r::provider.eq(provider)).filter(r::team_name.eq(name)))
        .execute(conn)?;
    Ok(())
}

/// A one-time code's row: what it was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsoCodeRow {
    /// The code's digest.
    pub code_hash: String,
    /// The admission it stands for, as JSON (the service's `SsoAdmission`).
    pub admission: String,
    /// The PKCE challenge (S256) the application started with.
    pub code_challenge: String,
    /// When it stops being accepted, UTC.
    pub expires_at: DateTime<Utc>,
}

/// Stores a one-time code.
///
/// # Errors
/// On database failure.
pub fn insert_code(conn: &mut DbConnection, row: &SsoCodeRow) -> Result<(), PersistenceError> {
    diesel::insert_into(c::table)
        .values((
            c::code_hash.eq(&row.code_hash),
            c::admission.eq(&row.admission),
            c::code_challenge.eq(&row.code_challenge),
            c::expires_at.eq(from_utc(row.expires_at)),
        ))
        .execute(conn)?;
    Ok(())
}

/// Takes the code with digest `code_hash`: its row, deleted, when it exists (expired or
/// not). Of two takers of one code, one gets it (the delete decides).
///
/// # Errors
/// On database failure.
pub fn take_code(
    conn: &mut DbConnection,
    code_hash: &str,
) -> Result<Option<SsoCodeRow>, PersistenceError> {
    let found: Option<(String, String, NaiveDateTime)> = c::table
        .filter(c::code_hash.eq(code_hash))
        .select((c::admission, c::code_challenge, c::expires_at))
        .first(conn)
        .optional()?;
    let Some((admission, code_challenge, expires_at)) = found else { return Ok(None) };
    let deleted = diesel::delete(c::table.filter(c::code_hash.eq(code_hash))).execute(conn)?;
    Ok((deleted == 1).then(|| SsoCodeRow {
        code_hash: code_hash.to_owned(),
        admission,
        code_challenge,
        expires_at: to_utc(expires_at),
    }))
}

/// Deletes the codes that expired before `before`; returns how many.
///
/// # Errors
/// On database failure.
pub fn prune_codes(
    conn: &mut DbConnection,
    before: DateTime<Utc>,
) -> Result<usize, PersistenceError> {
    Ok(diesel::delete(c::table.filter(c::expires_at.lt(from_utc(before)))).execute(conn)?)
}
