//! A team's usage and spend: the rollups of its keys' calls by day, model, member or key, and
//! what the team and each member spent in the current budget period.

use super::{MemberView, TeamAccess};
use crate::auth::Authorized;
use crate::error::ServiceError;
use crate::teams::Teams;
use crate::usage::{GroupBy, UsageQuery, UsageSummary, UsageTotals};
use aigw_domain::access::op;
use aigw_domain::usage::DayRange;
use aigw_domain::{BudgetPeriod, CounterSubject};
use aigw_domain::{TeamId, TeamRole};
use aigw_persistence::models::ApiKeyPolicy;
use aigw_persistence::usage::{self as ledger, TeamUsageGroup};
use aigw_persistence::{budgets, DbConnection, PersistenceError};
use chrono::{DateTime, NaiveDate, Utc};

/// The first UTC day the current period of `policy`'s budget counts from at `now`
/// (`1970-01-01`, the start of time, for `total`).
pub(super) fn period_start(policy: &ApiKeyPolicy, now: DateTime<Utc>) -> NaiveDate {
    let ever = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
    policy.budget_period.unwrap_or(BudgetPeriod::Total).start_day(now).unwrap_or(ever)
}

/// What team `team_id` spent since `from`, micro-USD.
pub(super) fn team_spend(
    conn: &mut DbConnection,
    team_id: &str,
    from: NaiveDate,
) -> Result<i64, PersistenceError> {
    let from = aigw_domain::usage::format_day(from);
    budgets::ledger_spend_since(conn, CounterSubject::Team(team_id), &from)
}

/// What each member of team `team_id` spent from `from` to `today`, micro-USD, by user id.
pub(super) fn member_spend(
    conn: &mut DbConnection,
    team_id: &TeamId,
    from: NaiveDate,
    today: NaiveDate,
) -> Result<std::collections::HashMap<String, i64>, PersistenceError> {
    let group = TeamUsageGroup::Member;
    let rows = ledger::team_summary(conn, Some(team_id), from, today, None, group)?;
    Ok(rows.into_iter().map(|r| (r.group, r.cost_micros)).collect())
}

/// Attaches each member's spend (from `spend`) and the end of the team's period (`policy`'s,
/// the one running at `now`) to `members`.
pub(super) fn with_spend(
    members: Vec<aigw_persistence::teams::MemberRow>,
    spend: &std::collections::HashMap<String, i64>,
    policy: &ApiKeyPolicy,
    now: DateTime<Utc>,
) -> Vec<MemberView> {
    let budget_reset_at = policy.budget_period.and_then(|p| p.reset_at(now));
    members
        .into_iter()
        .map(|member| {
            let spend_micros = spend.get(member.user_id.as_str()).copied().unwrap_or(0);
            MemberView { member: member.into(), spend_micros, budget_reset_at }
        })
        .collect()
}

/// A team its caller owns or administers, with its usage over a range of days.
#[derive(Debug, Clone)]
pub struct LedTeam {
    /// The team.
    pub id: TeamId,
    /// Its name.
    pub name: String,
    /// The caller's role in it (`owner` or `admin`).
    pub role: TeamRole,
    /// Its usage over the range (zero when it has none).
    pub totals: UsageTotals,
}

impl Teams {
    /// The teams (of the caller's first `limit`, newest first) that the caller owns or
    /// administers, each with its usage totals over the range of `query`'s `from` and `to`
    /// (UTC days), from one grouped read of the rollups; and that range.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `from` or `to`; [`ServiceError::Unavailable`] when the
    /// database is down.
    pub async fn led_team_usage(
        &self,
        principal: &Authorized<op::ReadUsage>,
        query: &UsageQuery,
        limit: i64,
    ) -> Result<(DayRange, Vec<LedTeam>), ServiceError> {
        let today = self.clock.now().date_naive();
        let range = DayRange::parse(query.from.as_deref(), query.to.as_deref(), today)?;
        let user_id = principal.user_id().to_owned();
        let led = self
            .db
            .run(move |conn| {
                let teams = aigw_persistence::teams::list_for_user(conn, &user_id, None, limit)?;
                let led: Vec<_> = teams.into_iter().filter(|(_, role)| role.manages()).collect();
                let ids: Vec<TeamId> = led.iter().map(|(t, _)| t.id.clone()).collect();
                let rows = ledger::teams_totals(conn, &ids, range.from, range.to)?;
                let totals = UsageSummary::of(range, GroupBy::Team, &rows).rows;
                Ok(led
                    .into_iter()
                    .map(|(team, role)| {
                        let found = totals.iter().find(|(id, _)| id.as_str() == team.id.as_str());
                        let totals = found.map(|(_, t)| *t).unwrap_or_default();
                        LedTeam { id: team.id, name: team.name, role, totals }
                    })
                    .collect())
            })
            .await?;
        Ok((range, led))
    }

    /// Team `id`'s usage over a range of UTC days (of one endpoint when `endpoint` is given),
    /// grouped by `day` (default), `model`, `member`, `api_key` or `endpoint` (its owners and
    /// admins, platform admins). Reads the rollups.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `from`, `to`, `group_by`, `endpoint` or `api_key_id` (not
    /// accepted here); [`ServiceError::NotFound`] (`team`); [`ServiceError::Forbidden`]
    /// (`team_admin`).
    pub async fn team_usage(
        &self,
        principal: &Authorized<op::ReadUsage>,
        id: &TeamId,
        query: UsageQuery,
    ) -> Result<UsageSummary, ServiceError> {
        let today = self.clock.now().date_naive();
        let range = DayRange::parse(query.from.as_deref(), query.to.as_deref(), today)?;
        let allowed =
            [GroupBy::Day, GroupBy::Model, GroupBy::Member, GroupBy::ApiKey, GroupBy::Endpoint];
        let group_by = GroupBy::parse_among(query.group_by.as_deref(), &allowed)?;
        let endpoint = query.endpoint()?.map(aigw_domain::usage::Endpoint::as_str);
        let group = match group_by {
            GroupBy::Model => TeamUsageGroup::Model,
            GroupBy::Member => TeamUsageGroup::Member,
            GroupBy::ApiKey => TeamUsageGroup::ApiKey,
            GroupBy::Endpoint => TeamUsageGroup::Endpoint,
            _ => TeamUsageGroup::Day,
        };
        let admin = self.is_platform_admin(principal).await?;
        let (team_id, user_id) = (id.to_owned(), principal.user_id().to_owned());
        self.db
            .run(move |conn| {
                TeamAccess::of(conn, &team_id, &user_id, admin)?.1.manage()?;
                let (from, to) = (range.from, range.to);
                let rows = ledger::team_summary(conn, Some(&team_id), from, to, endpoint, group)?;
                Ok(UsageSummary::labelled(conn, range, group_by, &rows)?)
            })
            .await
    }
}
