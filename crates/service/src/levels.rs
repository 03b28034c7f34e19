//! The levels a gateway call's limits are checked at: its API key, and for a key scoped to a
//! team, the member whose key it is and the team ([`LimitScope`]). Each level has its own
//! limits (an [`ApiKeyPolicy`]: budget and period, `rpm_limit`, `tpm_limit`, models) and its
//! own counters, named by [`CounterSubject`]; a call is admitted only when every level admits
//! it (`crate::governance::key_limits`).

use aigw_domain::{CounterSubject, LimitScope, TeamId, UserId};
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
    /// one: the key, then the member, then the team.
    pub(crate) fn of_key(
        key_id: &'a str,
        policy: &'a ApiKeyPolicy,
        team: Option<&'a Arc<TeamScope>>,
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
        std::iter::once(key).chain(member).chain(team)
    }

    /// Whether the level has any limit a call is counted against (budget, `rpm_limit`,
    /// `tpm_limit`).
    pub(crate) fn is_limited(&self) -> bool {
        self.policy.max_budget_micros.is_some()
            || self.policy.rpm_limit.is_some()
            || self.policy.tpm_limit.is_some()
    }
}
