//! Teams: groups of users that share a budget, rate limits and models (docs/teams.md).
//!
//! This folder owns the team use cases: the team itself and its policy (`manage`), its
//! members and invitations (`members`), and its team keys (`keys`). What a call by a
//! team-scoped key counts against is `crate::levels`; where that is enforced, the gateway's
//! admission (`crate::governance::key_limits`).
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
pub use usage::LedTeam;

use crate::account_email::AccountEmail;
use crate::api_keys::ApiKeys;
use crate::auth::Principal;
use crate::config::AuthConfig;
use crate::context::ServiceContext;
use crate::credential_cache::CredentialCache;
use crate::db::Db;
use crate::error::ServiceError;
pub(crate) use crate::team_access::{team_not_found, TeamAccess};
use crate::Clock;
use aigw_domain::key_policy::usd_to_micros;
use std::sync::Arc;

use aigw_domain::{FieldError, TeamRole};
use aigw_persistence::models::ApiKeyPolicy;
use aigw_persistence::teams::{MemberRow, TeamInvitationRow, TeamRow};

use chrono::{DateTime, Utc};

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
    /// Whether members must call the gateway with keys scoped to the team.
    pub require_scoped_keys: bool,
    /// The caller's role (`None`: a platform admin who is not a member).
    pub role: Option<TeamRole>,
    /// What the team spent in its current budget period (ever, for `total`), micro-USD,
    /// from the ledger; `None` where not read (in lists).
    pub spend_micros: Option<i64>,
}

impl TeamView {
    fn new(row: TeamRow, role: Option<TeamRole>) -> Self {
        Self {
            id: row.id.to_string(),
            name: row.name,
            created_by: row.created_by.to_string(),
            created_at: row.created_at,
            updated_at: row.updated_at,
            policy: row.policy,
            member_budget_micros: row.member_budget_micros,
            require_scoped_keys: row.require_scoped_keys,
            role,
            spend_micros: None,
        }
    }
}

/// A member as listed, with what they spent in the team's current budget period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    /// The membership.
    pub member: Member,
    /// Micro-USD the member's calls with their team-scoped keys cost in the team's current
    /// budget period (ever, for `total`).
    pub spend_micros: i64,
    /// When the team's current budget period ends, UTC (`None` for `total`).
    pub budget_reset_at: Option<DateTime<Utc>>,
}

/// A membership: who, in which team, with which role and budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The team.
    pub team_id: String,
    /// The member.
    pub user_id: String,
    /// The member's role.
    pub role: TeamRole,
    /// The member's own budget, overriding the team's default, micro-USD.
    pub budget_micros: Option<i64>,
    /// When the member joined, UTC.
    pub created_at: DateTime<Utc>,
    /// The member's e-mail address.
    pub email: String,
    /// The member's display name.
    pub name: String,
}

impl From<MemberRow> for Member {
    fn from(row: MemberRow) -> Self {
        let MemberRow { team_id, user_id, role, budget_micros, created_at, email, name } = row;
        Self {
            team_id: team_id.to_string(),
            user_id: user_id.to_string(),
            role,
            budget_micros,
            created_at,
            email,
            name,
        }
    }
}

/// An invitation to a team as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamInvitationView {
    /// UUIDv7 string.
    pub id: String,
    /// The team.
    pub team_id: String,
    /// The invited address, normalised.
    pub email: String,
    /// The role the member will have.
    pub role: TeamRole,
    /// Who invited.
    pub created_by: String,
    /// When, UTC.
    pub created_at: DateTime<Utc>,
    /// When an account with the address verified took it, UTC.
    pub accepted_at: Option<DateTime<Utc>>,
    /// When it was revoked, UTC.
    pub revoked_at: Option<DateTime<Utc>>,
    /// When it ends unless re-sent, UTC (`None`: never; made before invitations expired).
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was last e-mailed, UTC (`None`: never, no mailer).
    pub sent_at: Option<DateTime<Utc>>,
    /// Times it was e-mailed.
    pub sends: u32,
    /// Where it stands now.
    pub status: InvitationStatus,
}

pub use aigw_domain::invitation::InvitationStatus;

impl TeamInvitationView {
    /// `row` as it stands at `now` (UTC, the service's clock).
    pub(crate) fn at(row: TeamInvitationRow, now: DateTime<Utc>) -> Self {
        let TeamInvitationRow {
            id,
            team_id,
            email,
            role,
            created_by,
            created_at,
            accepted_at,
            revoked_at,
            expires_at,
            sent_at,
            sends,
        } = row;
        let status = InvitationStatus::of(
            revoked_at.is_some(),
            accepted_at.is_some(),
            expires_at.is_some_and(|at| at <= now),
            sent_at.is_some(),
        );
        Self {
            id: id.into_string(),
            team_id: team_id.to_string(),
            email,
            role,
            created_by: created_by.to_string(),
            created_at,
            accepted_at,
            revoked_at,
            expires_at,
            sent_at,
            sends: u32::try_from(sends).unwrap_or(0),
            status,
        }
    }
}

/// A budget in USD of field `field`, as micro-USD.
fn budget_micros(usd: f64, field: &str) -> Result<i64, FieldError> {
    usd_to_micros(usd).map_err(|e| FieldError::new(field, e.issue))
}

/// Teams: the team and its policy, members and invitations, team keys and the team's usage.
/// Built from the [`ServiceContext`], the API keys' use cases that team keys share
/// ([`ApiKeys`]).
#[derive(Debug, Clone)]
pub struct Teams {
    pub(crate) db: Db,
    pub(crate) clock: Clock,
    pub(crate) cache: CredentialCache,
    pub(crate) config: Arc<AuthConfig>,
    pub(crate) keys: ApiKeys,
    /// Sends the invitations.
    pub(crate) email: AccountEmail,
}

impl Teams {
    /// The team use cases on `ctx`, with `keys` for team keys, invitations e-mailed through
    /// `email`.
    pub fn new(ctx: &ServiceContext, keys: ApiKeys, email: AccountEmail) -> Self {
        Self {
            db: ctx.db.clone(),
            clock: ctx.clock.clone(),
            cache: ctx.cache.clone(),
            config: ctx.config.clone(),
            keys,
            email,
        }
    }

    /// Whether `principal` is a platform admin (an access token of an admin account).
    async fn is_platform_admin(&self, principal: &Principal) -> Result<bool, ServiceError> {
        crate::team_access::is_platform_admin(&self.cache, principal).await
    }
}
