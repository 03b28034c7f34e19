//! Teams: groups of users that share a budget, rate limits and models (docs/teams.md).
//!
//! This folder owns the team use cases: the team itself and its policy (`manage`), its
//! members and invitations (`members`), and its team keys (`keys`). What a call by a
//! team-scoped key counts against is `crate::limits::levels`; where that is enforced, the gateway's
//! admission (`crate::limits::key_limits`).
//!
//! Who may do what, checked in the transaction of each change:
//!
//! | action | who |
//! |---|---|
//! | read a team, its members, team keys and invitations | its members, platform admins |
//! | change its policy, members (not owners), invitations, team keys | its owners and admins, platform admins |
//! | add, demote or remove an owner; delete the team | its owners, platform admins |
//! | leave | any member but the last owner |
//!
//! A non-member gets 404 for the team (its existence is not disclosed); a member without the
//! role gets 403 (`required: team_admin` or `team_owner`). Every change of a team's policy or
//! membership appends a `team_changed` row to the change feed and answers once every live
//! node has applied it, so a removed member's keys stop on every node at once.

mod keys;
mod manage;
mod members;
mod usage;

pub use manage::{NewTeam, TeamPatch};
pub use members::{MemberAdded, MemberPatch, NewMember};

use crate::auth::{AuthService, Principal};
use crate::error::ServiceError;
use aigw_domain::key_policy::usd_to_micros;
use aigw_domain::AuditAction;
use aigw_domain::{FieldError, Role, TeamRole};
use aigw_persistence::models::{ApiKeyPolicy, UserRow};
use aigw_persistence::teams::{self, MemberRow, TeamInvitationRow, TeamRow};

use aigw_persistence::DbConnection;
use chrono::{DateTime, Utc};

/// Longest id echoed back in a 404, in characters.
const MAX_ECHOED_ID: usize = 64;

/// A team as answered, with the caller's role in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamView {
    /// UUIDv7 string.
    pub id: String,
    /// Display name.
    pub name: String,
    /// The user who created it.
    pub created_by: String,
    /// Creation time, UTC.
    pub created_at: DateTime<Utc>,
    /// Last change of its name or policy, UTC.
    pub updated_at: DateTime<Utc>,
    /// Budget, period, rate limits, models and metadata.
    pub policy: ApiKeyPolicy,
    /// Each member's budget per period unless overridden, micro-USD.
    pub member_budget_micros: Option<i64>,
    /// The caller's role (`None`: a platform admin who is not a member).
    pub role: Option<TeamRole>,
    /// What the team spent in its current budget period (ever, for `total`), micro-USD,
    /// from the ledger; `None` where not read (in lists).
    pub spend_micros: Option<i64>,
}

impl TeamView {
    fn new(row: TeamRow, role: Option<TeamRole>) -> Self {
        Self {
            id: row.id,
            name: row.name,
            created_by: row.created_by,
            created_at: row.created_at,
            updated_at: row.updated_at,
            policy: row.policy,
            member_budget_micros: row.member_budget_micros,
            role,
            spend_micros: None,
        }
    }
}

/// A member as listed, with what they spent in the team's current budget period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    /// The membership.
    pub member: MemberRow,
    /// Micro-USD the member's calls with their team-scoped keys cost in the team's current
    /// budget period (ever, for `total`).
    pub spend_micros: i64,
    /// When the team's current budget period ends, UTC (`None` for `total`).
    pub budget_reset_at: Option<DateTime<Utc>>,
}

/// An open invitation as listed.
pub type TeamInvitationView = TeamInvitationRow;

/// What the caller may do in a team.
#[derive(Debug, Clone, Copy)]
struct TeamAccess {
    /// The caller's role, when a member.
    role: Option<TeamRole>,
    /// Whether the caller is a platform admin (who may do anything an owner may).
    platform_admin: bool,
}

impl TeamAccess {
    /// Reads the caller's access to team `team_id` on `conn`.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`team`) when the team does not exist or the caller is
    /// neither a member nor a platform admin.
    fn of(
        conn: &mut DbConnection,
        team_id: &str,
        user_id: &str,
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
    fn manage(self) -> Result<Self, ServiceError> {
        if self.platform_admin || self.role.is_some_and(TeamRole::manages) {
            return Ok(self);
        }
        Err(self.refused("team_admin"))
    }

    /// Requires the team's owner role (or a platform admin).
    fn own(self) -> Result<Self, ServiceError> {
        if self.platform_admin || self.role == Some(TeamRole::Owner) {
            return Ok(self);
        }
        Err(self.refused("team_owner"))
    }

    fn refused(self, required: &str) -> ServiceError {
        ServiceError::Forbidden {
            required: required.to_owned(),
            current: self.role.map_or("none", TeamRole::as_str).to_owned(),
        }
    }
}

pub(crate) fn team_not_found(id: &str) -> ServiceError {
    ServiceError::NotFound { resource: "team", id: id.chars().take(MAX_ECHOED_ID).collect() }
}

/// A budget in USD of field `field`, as micro-USD.
fn budget_micros(usd: f64, field: &str) -> Result<i64, FieldError> {
    usd_to_micros(usd).map_err(|e| FieldError::new(field, e.issue))
}

/// Checks, in the transaction that inserts it, that `user_id` may create a key scoped to team
/// `team_id`: a member for their own key, an owner or admin for a team key (`team_owned`).
///
/// # Errors
/// [`ServiceError::NotFound`] (`team`) when the team does not exist or `user_id` is not a
/// member; [`ServiceError::Forbidden`] (`team_admin`) for a team key by a plain member.
pub(crate) fn check_key_creation(
    conn: &mut DbConnection,
    team_id: &str,
    user_id: &str,
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

/// Adds a user who has just registered to the teams whose open invitations name their
/// address (in the registration's transaction), each with an audit event.
///
/// # Errors
/// On database failure (the registration then rolls back).
pub(crate) fn join_invited(
    conn: &mut DbConnection,
    user: &UserRow,
    now: DateTime<Utc>,
) -> Result<(), ServiceError> {
    for invitation in teams::accept_invitations(conn, &user.email, now)? {
        if !teams::lock(conn, &invitation.team_id)? {
            continue;
        }
        teams::insert_member(conn, &invitation.team_id, &user.id, invitation.role, now)?;
        crate::admin::audit::Event::new(
            AuditAction::MemberAdded,
            Some(&user.id),
            Some(&invitation.created_by),
            now,
        )
        .target(&invitation.team_id)
        .details(serde_json::json!({
            "team_id": invitation.team_id,
            "role": invitation.role.as_str(),
            "invitation_id": invitation.id,
        }))
        .insert(conn)?;
    }
    Ok(())
}

impl AuthService {
    /// Whether `principal` is a platform admin (an access token of an admin account).
    async fn is_platform_admin(&self, principal: &Principal) -> Result<bool, ServiceError> {
        if !matches!(principal, Principal::User { .. }) {
            return Ok(false);
        }
        Ok(self.cache.user(principal.user_id()).await?.is_some_and(|u| u.role == Role::Admin))
    }
}
