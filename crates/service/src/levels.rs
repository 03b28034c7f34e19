//! The levels a gateway call's limits are checked at: its API key; for a key scoped to a
//! team, the member whose key it is and the team; and for any key but a team key, its owner's
//! budget across all their keys ([`LimitScope`]). Each level has its own
//! limits (an [`ApiKeyPolicy`]: budget and period, `rpm_limit`, `tpm_limit`, models) and its
//! own counters, named by [`CounterSubject`]; a call is admitted only when every level admits
//! it (`crate::governance::key_limits`).

use aigw_domain::{BudgetPeriod, CounterSubject, LimitScope, TeamId, UserId};
use aigw_persistence::models::ApiKeyPolicy;
use aigw_persistence::teams::{MemberRow, TeamRow};
use std::sync::Arc;

/// What a team-scoped key counts against beyond itself, as read when the key was
/// authenticated (the change feed re-reads it on every node when the team or its membership
/// changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamScope {
    /// The team's id.
    pub team_id: TeamId,
    /// The team's counter name (`team:<id>`).
    pub(crate) counter: String,
    /// The team's limits.
    pub policy: ApiKeyPolicy,
    /// The member the key belongs to (`None` for a team key).
    pub member: Option<MemberScope>,
}

/// A member's budget in a team: their override, else the team's `member_budget_micros`, per
/// the team's `budget_period`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberScope {
    /// The member's user id.
    pub user_id: UserId,
    /// The member's counter name (`member:<team id>:<user id>`).
    pub(crate) counter: String,
    /// The member's limits: only `max_budget_micros`, `budget_period` and `budget_mode` (the
    /// team's) are set.
    pub policy: ApiKeyPolicy,
}

impl TeamScope {
    /// The scope of `team` for a key of `member` (`None`: a team key).
    pub(crate) fn new(team: TeamRow, member: Option<&MemberRow>) -> Self {
        let member = member.map(|m| MemberScope {
            counter: CounterSubject::Member { team_id: &team.id, user_id: &m.user_id }.name(),
            user_id: m.user_id.as_str().into(),
            policy: ApiKeyPolicy {
                max_budget_micros: m.budget_micros.or(team.member_budget_micros),
                budget_period: team.policy.budget_period,
                budget_mode: team.policy.budget_mode,
                ..ApiKeyPolicy::default()
            },
        });
        Self {
            counter: CounterSubject::Team(&team.id).name(),
            team_id: team.id,
            policy: team.policy,
            member,
        }
    }
}

/// A user's budget across all their keys but team keys: their own (`users.budget_micros`,
/// set by admins), else the platform's `gateway.user_budget_usd`, per
/// `gateway.user_budget_period`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserScope {
    /// The user's counter name (`user:<user id>`).
    pub(crate) counter: String,
    /// The user's limits: only `max_budget_micros` and `budget_period` are set.
    pub policy: ApiKeyPolicy,
}

impl UserScope {
    /// The budget of user `user_id`, `budget_micros` micro-USD per `period`.
    pub(crate) fn new(user_id: &str, budget_micros: i64, period: BudgetPeriod) -> Self {
        Self {
            counter: CounterSubject::User(user_id).name(),
            policy: ApiKeyPolicy {
                max_budget_micros: Some(budget_micros),
                budget_period: Some(period),
                ..ApiKeyPolicy::default()
            },
        }
    }
}

/// Why a key with no team may not call the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeRequired {
    /// `gateway.require_team_scope`: every gateway key must be scoped to a team.
    Platform,
    /// A team of the key's owner whose members must call with keys scoped to it
    /// (`require_scoped_keys`).
    Team(TeamId),
}

/// The platform's spend rules that every key's authentication applies (`[gateway]`
/// `user_budget_usd`, `user_budget_period`, `require_team_scope`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformSpend {
    /// Every user's budget unless an admin set their own, micro-USD per
    /// `user_budget_period`; `None`: no default.
    pub user_budget_micros: Option<i64>,
    /// The period of users' budgets.
    pub user_budget_period: BudgetPeriod,
    /// Whether every key with `ai_gateway` must be scoped to a team.
    pub require_team_scope: bool,
}

impl Default for PlatformSpend {
    fn default() -> Self {
        Self {
            user_budget_micros: None,
            user_budget_period: BudgetPeriod::Monthly,
            require_team_scope: false,
        }
    }
}

impl PlatformSpend {
    /// The rules of `gateway`.
    ///
    /// # Errors
    /// [`aigw_domain::FieldError`] on `gateway.user_budget_usd` when it is negative, not a
    /// number or above 1 000 000 000.
    pub fn from_config(
        gateway: &crate::config::GatewayConfig,
    ) -> Result<Self, aigw_domain::FieldError> {
        let user_budget_micros = gateway
            .user_budget_usd
            .map(aigw_domain::key_policy::usd_to_micros)
            .transpose()
            .map_err(|e| aigw_domain::FieldError::new("gateway.user_budget_usd", e.issue))?;
        Ok(Self {
            user_budget_micros,
            user_budget_period: gateway.user_budget_period,
            require_team_scope: gateway.require_team_scope,
        })
    }

    /// The budget of user `user_id`, whose own budget is `own` (micro-USD), if any applies.
    pub(crate) fn user_scope(&self, user_id: &str, own: Option<i64>) -> Option<UserScope> {
        own.or(self.user_budget_micros)
            .map(|budget| UserScope::new(user_id, budget, self.user_budget_period))
    }
}

/// One level of a call's limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LimitLevel<'a> {
    /// Which level.
    pub(crate) scope: LimitScope,
    /// Its counters' name ([`CounterSubject::name`]).
    pub(crate) counter: &'a str,
    /// Its limits.
    pub(crate) policy: &'a ApiKeyPolicy,
}

impl<'a> LimitLevel<'a> {
    /// The levels of a call by key `key_id` with limits `policy`, in `team` when scoped to
    /// one, of an owner with budget `user`: the key, then the member, then the team, then the
    /// user.
    pub(crate) fn of_key(
        key_id: &'a str,
        policy: &'a ApiKeyPolicy,
        team: Option<&'a Arc<TeamScope>>,
        user: Option<&'a Arc<UserScope>>,
    ) -> impl Iterator<Item = LimitLevel<'a>> {
        let key = LimitLevel { scope: LimitScope::Key, counter: key_id, policy };
        let member = team.and_then(|t| t.member.as_ref()).map(|m| LimitLevel {
            scope: LimitScope::Member,
            counter: &m.counter,
            policy: &m.policy,
        });
        let team = team.map(|t| LimitLevel {
            scope: LimitScope::Team,
            counter: &t.counter,
            policy: &t.policy,
        });
        let user = user.map(|u| LimitLevel {
            scope: LimitScope::User,
            counter: &u.counter,
            policy: &u.policy,
        });
        std::iter::once(key).chain(member).chain(team).chain(user)
    }

    /// Whether the level has any limit a call is counted against (budget, `rpm_limit`,
    /// `tpm_limit`).
    pub(crate) fn is_limited(&self) -> bool {
        self.policy.max_budget_micros.is_some()
            || self.policy.rpm_limit.is_some()
            || self.policy.tpm_limit.is_some()
    }
}
