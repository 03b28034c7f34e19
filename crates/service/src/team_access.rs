//! Who may act in a team, as every capability that touches one reads it: a member's role, the
//! platform admin's override, the 404 that hides a team from non-members, and the two checks
//! other capabilities make inside their own transactions (a key scoped to a team, an address
//! verified that accepts invitations). The team use cases are `crate::teams`.

use crate::audit::Event;
use crate::credential_cache;
use crate::error::ServiceError;
use aigw_domain::{AuditAction, CredentialChangeKind, TeamId, TeamRole, UserId};
use aigw_persistence::changes::ChangeRow;
use aigw_persistence::models::UserRow;
use aigw_persistence::teams::{self, TeamRow};
use aigw_persistence::DbConnection;
use chrono::{DateTime, Utc};

/// Longest id echoed back in a 404, in characters.
const MAX_ECHOED_ID: usize = 64;

/// What the caller may do in a team.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TeamAccess {
    /// The caller's role, when a member.
    pub(crate) role: Option<TeamRole>,
    /// Whether the caller is a platform admin (who may do anything an owner may).
    pub(crate) platform_admin: bool,
}

impl TeamAccess {
    /// Reads the caller's access to team `team_id` on `conn`.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`team`) when the team does not exist or the caller is
    /// neither a member nor a platform admin.
    pub(crate) fn of(
        conn: &mut DbConnection,
        team_id: &TeamId,
        user_id: &UserId,
        platform_admin: bool,
    ) -> Result<(TeamRow, Self), ServiceError> {
        let team = teams::find(conn, team_id)?.ok_or_else(|| team_not_found(team_id))?;
        let role = teams::member(conn, team_id, user_id)?.map(|m| m.role);
        if role.is_none() && !platform_admin {
            return Err(team_not_found(team_id));
        }
        Ok((team, Self { role, platform_admin }))
    }

    /// Requires the team's admin or owner role (or a platform admin).
    pub(crate) fn manage(self) -> Result<Self, ServiceError> {
        if self.platform_admin || self.role.is_some_and(TeamRole::manages) {
            return Ok(self);
        }
        Err(self.refused("team_admin"))
    }

    /// Requires the team's owner role (or a platform admin).
    pub(crate) fn own(self) -> Result<Self, ServiceError> {
        if self.platform_admin || self.role == Some(TeamRole::Owner) {
            return Ok(self);
        }
        Err(self.refused("team_owner"))
    }

    pub(crate) fn refused(self, required: &str) -> ServiceError {
        ServiceError::Forbidden {
            required: required.to_owned(),
            current: self.role.map_or("none", TeamRole::as_str).to_owned(),
        }
    }
}

/// Whether `principal` is a platform admin holding an access token (who may do anything a
/// team's owner may), from the user cache.
///
/// # Errors
/// [`ServiceError::Unavailable`] when the database is needed and down.
pub(crate) async fn is_platform_admin(
    cache: &crate::credential_cache::CredentialCache,
    principal: &crate::auth::Principal,
) -> Result<bool, ServiceError> {
    if !matches!(principal, crate::auth::Principal::User { .. }) {
        return Ok(false);
    }
    let user = cache.user(principal.user_id()).await?;
    Ok(user.is_some_and(|u| u.role == aigw_domain::Role::Admin))
}

pub(crate) fn team_not_found(id: &str) -> ServiceError {
    ServiceError::NotFound { resource: "team", id: id.chars().take(MAX_ECHOED_ID).collect() }
}

/// 404 for user `id`, who is not a member of the team.
pub(crate) fn member_not_found(id: &str) -> ServiceError {
    ServiceError::NotFound { resource: "team_member", id: id.chars().take(MAX_ECHOED_ID).collect() }
}

/// Checks, in the transaction that inserts it, that `user_id` may create a key scoped to team
/// `team_id`: a member for their own key, an owner or admin for a team key (`team_owned`).
///
/// # Errors
/// [`ServiceError::NotFound`] (`team`) when the team does not exist or `user_id` is not a
/// member; [`ServiceError::Forbidden`] (`team_admin`) for a team key by a plain member.
pub(crate) fn check_key_creation(
    conn: &mut DbConnection,
    team_id: &TeamId,
    user_id: &UserId,
    team_owned: bool,
) -> Result<(), ServiceError> {
    // Locks the team's row: a concurrent removal of the member waits for the key, and then
    // sees it (its feed row makes every node read the key's membership again).
    if !teams::lock(conn, team_id)? {
        return Err(team_not_found(team_id));
    }
    let (_, access) = TeamAccess::of(conn, team_id, user_id, false)?;
    if team_owned {
        access.manage()?;
    }
    Ok(())
}

/// Checks, in the transaction that inserts it, that `caller` may create a key for `member`
/// scoped to team `team_id`: the caller manages the team (an owner or admin of it, or a
/// platform admin, `platform_admin`) and `member` is a member.
///
/// # Errors
/// [`ServiceError::NotFound`] (`team`) when the team does not exist or the caller is not a
/// member (nor a platform admin); [`ServiceError::Forbidden`] (`team_admin`) for a plain
/// member; [`ServiceError::NotFound`] (`team_member`) when `member` is not a member.
pub(crate) fn check_key_for_member(
    conn: &mut DbConnection,
    team_id: &TeamId,
    caller: &UserId,
    member: &UserId,
    platform_admin: bool,
) -> Result<(), ServiceError> {
    if !teams::lock(conn, team_id)? {
        return Err(team_not_found(team_id));
    }
    TeamAccess::of(conn, team_id, caller, platform_admin)?.1.manage()?;
    if teams::member(conn, team_id, member)?.is_none() {
        return Err(member_not_found(member));
    }
    Ok(())
}

/// Adds `user`, whose address (`user.email`) has just been verified, to the teams whose open
/// invitations name that address, each with its role and an audit event, in the caller's
/// transaction (a verification, an e-mail change, a password reset). Returns one change per
/// team joined, for every node's caches.
///
/// # Errors
/// On database failure (the caller's transaction then rolls back).
pub(crate) fn join_invited(
    conn: &mut DbConnection,
    user: &UserRow,
    now: DateTime<Utc>,
) -> Result<Vec<ChangeRow>, ServiceError> {
    let mut changes = Vec::new();
    for invitation in teams::accept_invitations(conn, &user.email, now)? {
        if !teams::lock(conn, &invitation.team_id)? {
            continue;
        }
        if teams::member(conn, &invitation.team_id, &user.id)?.is_some() {
            continue;
        }
        teams::insert_member(conn, &invitation.team_id, &user.id, invitation.role, now)?;
        Event::new(AuditAction::MemberAdded, Some(&user.id), Some(&invitation.created_by), now)
            .target(&invitation.team_id)
            .details(serde_json::json!({
                "team_id": invitation.team_id,
                "role": invitation.role.as_str(),
                "invitation_id": invitation.id,
            }))
            .insert(conn)?;
        let kind = CredentialChangeKind::TeamChanged;
        changes.push(credential_cache::append(conn, kind, &invitation.team_id, now)?);
    }
    Ok(changes)
}
