//! Repository of `teams`, `team_members` and `team_invitations`. A deleted team keeps its row
//! (`deleted_at`) for its usage history; every read here but [`find_any`] skips it.
//!
//! Lists are paged by keyset (newest id first, `before` the last id of the previous page), so
//! a page costs the same at 10 k teams as at 10.

use crate::error::PersistenceError;
use crate::models::{from_utc, metadata_to_storage, models_to_storage, to_utc, ApiKeyPolicy};
use crate::pool::DbConnection;
use crate::schema::{team_invitations as inv, team_members as m, teams as t, users};
use aigw_domain::TeamRole;
use aigw_domain::{TeamId, TeamInvitationId, UserId};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

/// A team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamRow {
    /// UUIDv7 string.
    pub id: TeamId,
    /// Display name.
    pub name: String,
    /// The user who created it.
    pub created_by: UserId,
    /// Creation time, UTC.
    pub created_at: DateTime<Utc>,
    /// Last change of its name or policy, UTC.
    pub updated_at: DateTime<Utc>,
    /// The team's limits (the same fields and meaning as a key's).
    pub policy: ApiKeyPolicy,
    /// Each member's budget per the team's period unless overridden, micro-USD.
    pub member_budget_micros: Option<i64>,
    /// Whether members must make gateway calls with keys scoped to the team (their personal
    /// keys are then refused for gateway calls).
    pub require_scoped_keys: bool,
}

/// A change to a team (PATCH): `None` leaves a field alone, `Some(None)` clears it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TeamChanges {
    /// New name.
    pub name: Option<String>,
    /// Policy changes, as a key's.
    pub policy: crate::models::ApiKeyChanges,
    /// New default member budget, micro-USD.
    pub member_budget_micros: Option<Option<i64>>,
    /// New [`TeamRow::require_scoped_keys`].
    pub require_scoped_keys: Option<bool>,
}

impl TeamChanges {
    /// The names of the fields this change sets or clears (for the audit trail).
    pub fn field_names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.name.is_some() {
            names.push("name");
        }
        names.extend(self.policy.field_names());
        if self.member_budget_micros.is_some() {
            names.push("member_budget_usd");
        }
        if self.require_scoped_keys.is_some() {
            names.push("require_scoped_keys");
        }
        names
    }
}

/// A membership, with the member's account fields a listing shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRow {
    /// The team.
    pub team_id: TeamId,
    /// The member.
    pub user_id: UserId,
    /// The member's role.
    pub role: TeamRole,
    /// The member's own budget, overriding the team's default, micro-USD.
    pub budget_micros: Option<i64>,
    /// When the member joined, UTC.
    pub created_at: DateTime<Utc>,
    /// The member's e-mail address (empty where not read).
    pub email: String,
    /// The member's display name (empty where not read).
    pub name: String,
}

/// An invitation to a team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamInvitationRow {
    /// UUIDv7 string.
    pub id: TeamInvitationId,
    /// The team.
    pub team_id: TeamId,
    /// The invited address, normalised.
    pub email: String,
    /// The role the member will have.
    pub role: TeamRole,
    /// Who invited.
    pub created_by: UserId,
    /// When, UTC.
    pub created_at: DateTime<Utc>,
    /// When an account with the address verified took it, UTC.
    pub accepted_at: Option<DateTime<Utc>>,
    /// When it was revoked, UTC.
    pub revoked_at: Option<DateTime<Utc>>,
    /// When it ends unless re-sent, UTC (`None`: made before invitations expired; never).
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was last e-mailed, UTC (`None`: never, no mailer).
    pub sent_at: Option<DateTime<Utc>>,
    /// Times it was e-mailed.
    pub sends: i32,
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = t)]
struct TeamRecord {
    id: String,
    name: String,
    created_by: String,
    created_at: NaiveDateTime,
    updated_at: NaiveDateTime,
    deleted_at: Option<NaiveDateTime>,
    allowed_models: Option<String>,
    max_budget_micros: Option<i64>,
    budget_period: Option<String>,
    rpm_limit: Option<i64>,
    tpm_limit: Option<i64>,
    metadata: Option<String>,
    member_budget_micros: Option<i64>,
    budget_mode: Option<String>,
    require_scoped_keys: bool,
}

impl From<TeamRecord> for TeamRow {
    fn from(r: TeamRecord) -> Self {
        Self {
            policy: ApiKeyPolicy::from_storage(
                r.allowed_models.as_deref(),
                (r.max_budget_micros, r.budget_period.as_deref(), r.budget_mode.as_deref()),
                (r.rpm_limit, r.tpm_limit),
                r.metadata.as_deref(),
            ),
            id: r.id.into(),
            name: r.name,
            created_by: r.created_by.into(),
            created_at: to_utc(r.created_at),
            updated_at: to_utc(r.updated_at),
            member_budget_micros: r.member_budget_micros,
            require_scoped_keys: r.require_scoped_keys,
        }
    }
}

#[derive(Debug, Default, AsChangeset)]
#[diesel(table_name = t)]
struct TeamChangeset {
    name: Option<String>,
    updated_at: Option<NaiveDateTime>,
    allowed_models: Option<Option<String>>,
    max_budget_micros: Option<Option<i64>>,
    budget_period: Option<Option<String>>,
    rpm_limit: Option<Option<i64>>,
    tpm_limit: Option<Option<i64>>,
    metadata: Option<Option<String>>,
    member_budget_micros: Option<Option<i64>>,
    budget_mode: Option<Option<String>>,
    require_scoped_keys: Option<bool>,
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = m)]
struct MemberRecord {
    team_id: String,
    user_id: String,
    role: String,
    budget_micros: Option<i64>,
    created_at: NaiveDateTime,
}

impl MemberRecord {
    fn into_row(self, email: String, name: String) -> MemberRow {
        MemberRow {
            team_id: self.team_id.into(),
            user_id: self.user_id.into(),
            role: TeamRole::from_stored(&self.role),
            budget_micros: self.budget_micros,
            created_at: to_utc(self.created_at),
            email,
            name,
        }
    }
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = inv)]
struct InvitationRecord {
    id: String,
    team_id: String,
    email: String,
    role: String,
    created_by: String,
    created_at: NaiveDateTime,
    accepted_at: Option<NaiveDateTime>,
    revoked_at: Option<NaiveDateTime>,
    expires_at: Option<NaiveDateTime>,
    sent_at: Option<NaiveDateTime>,
    sends: i32,
}

impl From<InvitationRecord> for TeamInvitationRow {
    fn from(r: InvitationRecord) -> Self {
        Self {
            role: TeamRole::from_stored(&r.role),
            id: r.id.into(),
            team_id: r.team_id.into(),
            email: r.email,
            created_by: r.created_by.into(),
            created_at: to_utc(r.created_at),
            accepted_at: r.accepted_at.map(to_utc),
            revoked_at: r.revoked_at.map(to_utc),
            expires_at: r.expires_at.map(to_utc),
            sent_at: r.sent_at.map(to_utc),
            sends: r.sends,
        }
    }
}

/// Inserts `team` and its first member, `owner`, as its owner.
///
/// # Errors
/// On database failure.
pub fn insert(
    conn: &mut DbConnection,
    team: &TeamRow,
    owner: &UserId,
) -> Result<(), PersistenceError> {
    insert_without_members(conn, team)?;
    insert_member(conn, &team.id, owner, TeamRole::Owner, team.created_at)
}

/// Inserts `team` with no member yet (a team a single sign-on group rule makes: its
/// members join by the rules).
///
/// # Errors
/// On database failure.
pub fn insert_without_members(
    conn: &mut DbConnection,
    team: &TeamRow,
) -> Result<(), PersistenceError> {
    let p = &team.policy;
    let record = TeamRecord {
        id: team.id.to_string(),
        name: team.name.clone(),
        created_by: team.created_by.to_string(),
        created_at: from_utc(team.created_at),
        updated_at: from_utc(team.updated_at),
        deleted_at: None,
        allowed_models: p.allowed_models.as_ref().map(models_to_storage),
        max_budget_micros: p.max_budget_micros,
        budget_period: p.budget_period.map(|p| p.as_str().to_owned()),
        rpm_limit: p.rpm_limit,
        tpm_limit: p.tpm_limit,
        metadata: p.metadata.as_ref().map(metadata_to_storage),
        member_budget_micros: team.member_budget_micros,
        budget_mode: p.budget_mode.map(|m| m.as_str().to_owned()),
        require_scoped_keys: team.require_scoped_keys,
    };
    diesel::insert_into(t::table).values(record).execute(conn)?;
    Ok(())
}

/// The ids of the teams named exactly `name`, deleted ones excepted (at most 2: enough to
/// tell one from several).
///
/// # Errors
/// On database failure.
pub fn ids_named(conn: &mut DbConnection, name: &str) -> Result<Vec<TeamId>, PersistenceError> {
    let ids: Vec<String> = t::table
        .filter(t::name.eq(name))
        .filter(t::deleted_at.is_null())
        .select(t::id)
        .limit(2)
        .load(conn)?;
    Ok(ids.into_iter().map(TeamId::from).collect())
}

/// The names of the teams with ids `ids`, deleted ones included: `(id, name)`.
///
/// # Errors
/// On database failure.
pub fn names_of(
    conn: &mut DbConnection,
    ids: &[String],
) -> Result<Vec<(String, String)>, PersistenceError> {
    let mut found = Vec::new();
    for chunk in ids.chunks(500) {
        let rows: Vec<(String, String)> =
            t::table.filter(t::id.eq_any(chunk.to_vec())).select((t::id, t::name)).load(conn)?;
        found.extend(rows);
    }
    Ok(found)
}

/// Team `id`, unless deleted.
///
/// # Errors
/// On database failure.
pub fn find(conn: &mut DbConnection, id: &TeamId) -> Result<Option<TeamRow>, PersistenceError> {
    let id = id.as_str();
    Ok(t::table
        .filter(t::id.eq(id))
        .filter(t::deleted_at.is_null())
        .select(TeamRecord::as_select())
        .first(conn)
        .optional()?
        .map(TeamRow::from))
}

/// Locks team `id`'s row for the rest of the transaction (a no-op update; see
/// `users::lock`) and says whether it exists and is not deleted. Membership changes take it
/// first, so two of them cannot both remove "another" owner.
///
/// # Errors
/// On database failure.
pub fn lock(conn: &mut DbConnection, id: &TeamId) -> Result<bool, PersistenceError> {
    let id = id.as_str();
    let n = diesel::update(t::table.filter(t::id.eq(id)).filter(t::deleted_at.is_null()))
        .set(t::id.eq(t::id))
        .execute(conn)?;
    Ok(n == 1)
}

/// Up to `limit` teams `user_id` is a member of, with the user's role, newest first, after
/// team id `before` when given.
///
/// # Errors
/// On database failure.
pub fn list_for_user(
    conn: &mut DbConnection,
    user_id: &UserId,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<(TeamRow, TeamRole)>, PersistenceError> {
    let user_id = user_id.as_str();
    let mut query = m::table
        .inner_join(t::table)
        .filter(m::user_id.eq(user_id.to_owned()))
        .filter(t::deleted_at.is_null())
        .select((TeamRecord::as_select(), m::role))
        .into_boxed();
    if let Some(before) = before {
        query = query.filter(m::team_id.lt(before.to_owned()));
    }
    let rows: Vec<(TeamRecord, String)> = query.order(m::team_id.desc()).limit(limit).load(conn)?;
    Ok(rows.into_iter().map(|(team, role)| (team.into(), TeamRole::from_stored(&role))).collect())
}

/// Up to `limit` teams (not deleted), newest first, whose name contains `name` when given
/// (compared literally), each with its number of members.
///
/// # Errors
/// On database failure.
pub fn list_all(
    conn: &mut DbConnection,
    name: Option<&str>,
    limit: i64,
) -> Result<Vec<(TeamRow, i64)>, PersistenceError> {
    let mut query =
        t::table.filter(t::deleted_at.is_null()).select(TeamRecord::as_select()).into_boxed();
    if let Some(name) = name {
        let escaped = crate::users::like_literal(name);
        query = query.filter(t::name.like(format!("%{escaped}%")).escape('\\'));
    }
    let teams: Vec<TeamRecord> = query.order(t::id.desc()).limit(limit).load(conn)?;
    let mut listed = Vec::with_capacity(teams.len());
    for team in teams {
        let members: i64 =
            m::table.filter(m::team_id.eq(team.id.clone())).count().get_result(conn)?;
        listed.push((TeamRow::from(team), members));
    }
    Ok(listed)
}

/// Applies `changes` to team `id` at `now`; returns the team as it now is (`None`: no such
/// team). Call inside a transaction.
///
/// # Errors
/// On database failure.
pub fn update(
    conn: &mut DbConnection,
    id: &TeamId,
    changes: &TeamChanges,
    now: DateTime<Utc>,
) -> Result<Option<TeamRow>, PersistenceError> {
    let p = &changes.policy;
    let set = TeamChangeset {
        name: changes.name.clone(),
        updated_at: Some(from_utc(now)),
        allowed_models: p.allowed_models.as_ref().map(|m| m.as_ref().map(models_to_storage)),
        max_budget_micros: p.max_budget_micros,
        budget_period: p.budget_period.map(|p| p.map(|p| p.as_str().to_owned())),
        rpm_limit: p.rpm_limit,
        tpm_limit: p.tpm_limit,
        metadata: p.metadata.as_ref().map(|m| m.as_ref().map(metadata_to_storage)),
        member_budget_micros: changes.member_budget_micros,
        budget_mode: p.budget_mode.map(|m| m.map(|m| m.as_str().to_owned())),
        require_scoped_keys: changes.require_scoped_keys,
    };
    diesel::update(t::table.filter(t::id.eq(id.as_str())).filter(t::deleted_at.is_null()))
        .set(set)
        .execute(conn)?;
    find(conn, id)
}

/// Marks team `id` deleted at `now` and drops its memberships and open invitations; returns
/// whether it existed.
///
/// # Errors
/// On database failure.
pub fn delete(
    conn: &mut DbConnection,
    id: &TeamId,
    now: DateTime<Utc>,
) -> Result<bool, PersistenceError> {
    let id = id.as_str();
    let n = diesel::update(t::table.filter(t::id.eq(id)).filter(t::deleted_at.is_null()))
        .set(t::deleted_at.eq(from_utc(now)))
        .execute(conn)?;
    diesel::delete(m::table.filter(m::team_id.eq(id))).execute(conn)?;
    diesel::update(inv::table.filter(inv::team_id.eq(id)).filter(inv::accepted_at.is_null()))
        .filter(inv::revoked_at.is_null())
        .set(inv::revoked_at.eq(from_utc(now)))
        .execute(conn)?;
    Ok(n == 1)
}

/// Adds `user_id` to team `team_id` with `role`.
///
/// # Errors
/// [`PersistenceError::Conflict`] when already a member; others on database failure.
pub fn insert_member(
    conn: &mut DbConnection,
    team_id: &TeamId,
    user_id: &UserId,
    role: TeamRole,
    now: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    let team_id = team_id.as_str();
    let user_id = user_id.as_str();
    let record = MemberRecord {
        team_id: team_id.to_owned(),
        user_id: user_id.to_owned(),
        role: role.as_str().to_owned(),
        budget_micros: None,
        created_at: from_utc(now),
    };
    diesel::insert_into(m::table).values(record).execute(conn)?;
    Ok(())
}

/// `user_id`'s membership of team `team_id` (not deleted), if any.
///
/// # Errors
/// On database failure.
pub fn member(
    conn: &mut DbConnection,
    team_id: &TeamId,
    user_id: &UserId,
) -> Result<Option<MemberRow>, PersistenceError> {
    let team_id = team_id.as_str();
    let user_id = user_id.as_str();
    let row: Option<(MemberRecord, String, String)> = m::table
        .inner_join(users::table)
        .filter(m::team_id.eq(team_id))
        .filter(m::user_id.eq(user_id))
        .select((MemberRecord::as_select(), users::email, users::name))
        .first(conn)
        .optional()?;
    Ok(row.map(|(r, email, name)| r.into_row(email, name)))
}

/// The first team (by id) that `user_id` is a member of and that requires its members'
/// gateway calls to use keys scoped to it ([`TeamRow::require_scoped_keys`]), if any.
///
/// # Errors
/// On database failure.
pub fn requiring_scoped_keys(
    conn: &mut DbConnection,
    user_id: &UserId,
) -> Result<Option<TeamId>, PersistenceError> {
    let id: Option<String> = m::table
        .inner_join(t::table)
        .filter(m::user_id.eq(user_id.as_str()))
        .filter(t::require_scoped_keys.eq(true))
        .filter(t::deleted_at.is_null())
        .select(t::id)
        .order(t::id.asc())
        .first(conn)
        .optional()?;
    Ok(id.map(TeamId::from))
}

/// The owners and admins of team `team_id` (those who manage it), with their e-mail and
/// name, at most `limit`.
///
/// # Errors
/// On database failure.
pub fn managers(
    conn: &mut DbConnection,
    team_id: &TeamId,
    limit: i64,
) -> Result<Vec<MemberRow>, PersistenceError> {
    let roles = [TeamRole::Owner.as_str(), TeamRole::Admin.as_str()];
    let rows: Vec<(MemberRecord, String, String)> = m::table
        .inner_join(users::table)
        .filter(m::team_id.eq(team_id.as_str()))
        .filter(m::role.eq_any(roles))
        .select((MemberRecord::as_select(), users::email, users::name))
        .order(m::user_id.asc())
        .limit(limit)
        .load(conn)?;
    Ok(rows.into_iter().map(|(r, email, name)| r.into_row(email, name)).collect())
}

/// Up to `limit` members of team `team_id`, by user id descending, after `before`.
///
/// # Errors
/// On database failure.
pub fn list_members(
    conn: &mut DbConnection,
    team_id: &TeamId,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<MemberRow>, PersistenceError> {
    let team_id = team_id.as_str();
    let mut query = m::table
        .inner_join(users::table)
        .filter(m::team_id.eq(team_id.to_owned()))
        .select((MemberRecord::as_select(), users::email, users::name))
        .into_boxed();
    if let Some(before) = before {
        query = query.filter(m::user_id.lt(before.to_owned()));
    }
    let rows: Vec<(MemberRecord, String, String)> =
        query.order(m::user_id.desc()).limit(limit).load(conn)?;
    Ok(rows.into_iter().map(|(r, email, name)| r.into_row(email, name)).collect())
}

/// Sets member `user_id`'s role and/or budget override (`Some(None)` clears it); returns
/// whether the membership exists.
///
/// # Errors
/// On database failure.
pub fn update_member(
    conn: &mut DbConnection,
    team_id: &TeamId,
    user_id: &UserId,
    role: Option<TeamRole>,
    budget_micros: Option<Option<i64>>,
) -> Result<bool, PersistenceError> {
    let team_id = team_id.as_str();
    let user_id = user_id.as_str();
    #[derive(AsChangeset)]
    #[diesel(table_name = m)]
    struct Set {
        role: Option<String>,
        budget_micros: Option<Option<i64>>,
    }
    let target = m::table.filter(m::team_id.eq(team_id)).filter(m::user_id.eq(user_id));
    if role.is_none() && budget_micros.is_none() {
        return Ok(target.count().get_result::<i64>(conn)? == 1);
    }
    let set = Set { role: role.map(|r| r.as_str().to_owned()), budget_micros };
    Ok(diesel::update(target).set(set).execute(conn)? == 1)
}

/// Removes member `user_id` from team `team_id`; returns whether they were one.
///
/// # Errors
/// On database failure.
pub fn delete_member(
    conn: &mut DbConnection,
    team_id: &TeamId,
    user_id: &UserId,
) -> Result<bool, PersistenceError> {
    let team_id = team_id.as_str();
    let user_id = user_id.as_str();
    let target = m::table.filter(m::team_id.eq(team_id)).filter(m::user_id.eq(user_id));
    Ok(diesel::delete(target).execute(conn)? == 1)
}

/// How many owners team `team_id` has.
///
/// # Errors
/// On database failure.
pub fn count_owners(conn: &mut DbConnection, team_id: &TeamId) -> Result<i64, PersistenceError> {
    let team_id = team_id.as_str();
    Ok(m::table
        .filter(m::team_id.eq(team_id))
        .filter(m::role.eq(TeamRole::Owner.as_str()))
        .count()
        .get_result(conn)?)
}

/// Inserts an invitation.
///
/// # Errors
/// [`PersistenceError::Conflict`] when the address already has an open invitation to the
/// team; others on database failure.
pub fn insert_invitation(
    conn: &mut DbConnection,
    row: &TeamInvitationRow,
) -> Result<(), PersistenceError> {
    let record = InvitationRecord {
        id: row.id.to_string(),
        team_id: row.team_id.to_string(),
        email: row.email.clone(),
        role: row.role.as_str().to_owned(),
        created_by: row.created_by.to_string(),
        created_at: from_utc(row.created_at),
        accepted_at: None,
        revoked_at: None,
        expires_at: row.expires_at.map(from_utc),
        sent_at: row.sent_at.map(from_utc),
        sends: row.sends,
    };
    diesel::insert_into(inv::table).values(record).execute(conn)?;
    Ok(())
}

/// Invitation `id`, whatever its state.
///
/// # Errors
/// On database failure.
pub fn invitation(
    conn: &mut DbConnection,
    id: &TeamInvitationId,
) -> Result<Option<TeamInvitationRow>, PersistenceError> {
    let row: Option<InvitationRecord> = inv::table
        .filter(inv::id.eq(id.as_str()))
        .select(InvitationRecord::as_select())
        .first(conn)
        .optional()?;
    Ok(row.map(TeamInvitationRow::from))
}

/// Records that open invitation `id` of team `team_id` was sent again at `now` and now ends at
/// `expires_at`; returns it as updated (`None`: no such open invitation).
///
/// # Errors
/// On database failure.
pub fn resend_invitation(
    conn: &mut DbConnection,
    team_id: &TeamId,
    id: &TeamInvitationId,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    sent: bool,
) -> Result<Option<TeamInvitationRow>, PersistenceError> {
    let open = inv::table
        .filter(inv::id.eq(id.as_str()))
        .filter(inv::team_id.eq(team_id.as_str()))
        .filter(inv::accepted_at.is_null())
        .filter(inv::revoked_at.is_null());
    let changed = if sent {
        diesel::update(open)
            .set((
                inv::expires_at.eq(from_utc(expires_at)),
                inv::sent_at.eq(from_utc(now)),
                inv::sends.eq(inv::sends + 1),
            ))
            .execute(conn)?
    } else {
        diesel::update(open).set(inv::expires_at.eq(from_utc(expires_at))).execute(conn)?
    };
    if changed == 0 {
        return Ok(None);
    }
    let row: InvitationRecord = inv::table
        .filter(inv::id.eq(id.as_str()))
        .select(InvitationRecord::as_select())
        .first(conn)?;
    Ok(Some(row.into()))
}

/// Up to `limit` open invitations of team `team_id` (of every team when `None`), newest
/// first, after id `before`; expired ones included (they can be re-sent).
///
/// # Errors
/// On database failure.
pub fn list_invitations(
    conn: &mut DbConnection,
    team_id: Option<&str>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<TeamInvitationRow>, PersistenceError> {
    let mut query = inv::table
        .filter(inv::accepted_at.is_null())
        .filter(inv::revoked_at.is_null())
        .select(InvitationRecord::as_select())
        .into_boxed();
    if let Some(team_id) = team_id {
        query = query.filter(inv::team_id.eq(team_id.to_owned()));
    }
    if let Some(before) = before {
        query = query.filter(inv::id.lt(before.to_owned()));
    }
    let rows: Vec<InvitationRecord> = query.order(inv::id.desc()).limit(limit).load(conn)?;
    Ok(rows.into_iter().map(TeamInvitationRow::from).collect())
}

/// Revokes open invitation `id` of team `team_id` (of any team when `None`) at `now`;
/// returns the team of the invitation revoked, if there was one.
///
/// # Errors
/// On database failure.
pub fn revoke_invitation(
    conn: &mut DbConnection,
    team_id: Option<&TeamId>,
    id: &TeamInvitationId,
    now: DateTime<Utc>,
) -> Result<Option<String>, PersistenceError> {
    let team_id = team_id.map(TeamId::as_str);
    let open = inv::table
        .filter(inv::id.eq(id.as_str()))
        .filter(inv::accepted_at.is_null())
        .filter(inv::revoked_at.is_null());
    let Some(team) = open.select(inv::team_id).first::<String>(conn).optional()? else {
        return Ok(None);
    };
    if team_id.is_some_and(|t| t != team) {
        return Ok(None);
    }
    diesel::update(open).set(inv::revoked_at.eq(from_utc(now))).execute(conn)?;
    Ok(Some(team))
}

/// Marks every open, unexpired invitation of `email` (normalised) accepted at `now` and returns
/// them (the teams of deleted teams are dropped with them). Call in the transaction that
/// verifies the address.
///
/// # Errors
/// On database failure.
pub fn accept_invitations(
    conn: &mut DbConnection,
    email: &str,
    now: DateTime<Utc>,
) -> Result<Vec<TeamInvitationRow>, PersistenceError> {
    let at = from_utc(now);
    let open = inv::table
        .filter(inv::email.eq(email))
        .filter(inv::accepted_at.is_null())
        .filter(inv::revoked_at.is_null())
        .filter(inv::expires_at.is_null().or(inv::expires_at.gt(at)));
    let rows: Vec<InvitationRecord> = open.select(InvitationRecord::as_select()).load(conn)?;
    diesel::update(open).set(inv::accepted_at.eq(from_utc(now))).execute(conn)?;
    Ok(rows.into_iter().map(TeamInvitationRow::from).collect())
}
