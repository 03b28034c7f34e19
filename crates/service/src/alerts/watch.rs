//! Which budget alerts a batch of spend signals makes: for every budget a signal touched (the
//! key's; for a member's key the member's in the team; for a key scoped to a team the team's;
//! for any key but a team key its owner's), what it has spent in its period from the ledger,
//! and each threshold reached. An alert is claimed by inserting its row
//! ([`aigw_persistence::budget_alerts::claim`]), in the transaction that queues its webhook
//! delivery: whichever node sees the spend first sends it, once.

use super::alert::{Alert, Subject};
use crate::error::ServiceError;
use crate::governance::budget::{ledger_from, period_name};
use crate::levels::PlatformSpend;
use crate::spend_signal::SpendSignal;
use aigw_domain::BudgetPeriod;
use aigw_persistence::budget_alerts::{self, BudgetAlertRow};
use aigw_persistence::teams::{self, MemberRow};
use aigw_persistence::{api_keys, budgets, users, webhooks, DbConnection};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// How full a budget must be, percent of its limit spent or held by running calls, for a
/// refusal to count as reaching the top threshold: a refusal of one large call by a budget
/// with room for smaller ones is not an alert.
const FULL_PERCENT: i128 = 90;

/// The most owners and admins of a team one alert is e-mailed to.
const MAX_RECIPIENTS: i64 = 50;

/// Every budget `signals` touched, once each, with the most it held when it refused a call
/// (micro-USD spent and reserved; `None`: it refused none).
pub(super) fn subjects_of(signals: &[SpendSignal]) -> BTreeMap<Subject, Option<i64>> {
    let mut subjects = BTreeMap::new();
    for signal in signals {
        let team = signal.team_id.as_ref().map(|t| t.to_string());
        let user = signal.user_id.to_string();
        let mut touched = vec![Subject::Key(signal.key_id.to_string())];
        if let Some(team_id) = &team {
            if signal.member {
                touched.push(Subject::Member { team_id: team_id.clone(), user_id: user.clone() });
            }
            touched.push(Subject::Team(team_id.clone()));
        }
        if !signal.team_key() {
            touched.push(Subject::User(user));
        }
        for subject in touched {
            let refused =
                signal.refused.filter(|r| r.scope == subject.scope()).map(|r| r.committed_micros);
            let held = subjects.entry(subject).or_insert(None);
            *held = (*held).max(refused);
        }
    }
    subjects
}

/// A budget as an alert needs it.
struct Budget {
    limit_micros: i64,
    period: BudgetPeriod,
    /// What it is, for a person: "the API key “ci” (aigw_AbC…)".
    what: String,
    /// The team, for a team's, a member's or a team-scoped key's budget (its webhook).
    team_id: Option<String>,
    /// Who is e-mailed, read only once an alert is claimed.
    recipients: Recipients,
}

/// Who an alert of a budget is e-mailed to.
enum Recipients {
    /// A user, by id.
    Person(String),
    /// A team's owners and admins, by team id.
    Managers(String),
    /// Already read (a user's own budget: the user row was read for its limit).
    Known(Vec<(String, String)>),
}

impl Recipients {
    /// Their addresses and names.
    fn read(&self, conn: &mut DbConnection) -> Result<Vec<(String, String)>, ServiceError> {
        Ok(match self {
            Recipients::Person(id) => users::find_by_id(conn, &id.as_str().into())?
                .map(|u| (u.email, u.name))
                .into_iter()
                .collect(),
            Recipients::Managers(team_id) => {
                teams::managers(conn, &team_id.as_str().into(), MAX_RECIPIENTS)?
                    .into_iter()
                    .map(|m: MemberRow| (m.email, m.name))
                    .collect()
            }
            Recipients::Known(known) => known.clone(),
        })
    }
}

/// The budget of `subject`, if it has one.
fn budget_of(
    conn: &mut DbConnection,
    subject: &Subject,
    platform: &PlatformSpend,
) -> Result<Option<Budget>, ServiceError> {
    let budget = match subject {
        Subject::Key(id) => {
            let Some(key) = api_keys::find(conn, &id.as_str().into())? else { return Ok(None) };
            let team_id = key.team_id.as_ref().map(ToString::to_string);
            let recipients = match (&team_id, key.team_owned) {
                (Some(team_id), true) => Recipients::Managers(team_id.clone()),
                _ => Recipients::Person(key.user_id.to_string()),
            };
            key.policy.max_budget_micros.map(|limit_micros| Budget {
                limit_micros,
                period: key.policy.budget_period.unwrap_or(BudgetPeriod::Total),
                what: format!("the API key “{}” ({}…)", key.name, key.key_prefix),
                team_id,
                recipients,
            })
        }
        Subject::Member { team_id, user_id } => {
            let Some(team) = teams::find(conn, &team_id.as_str().into())? else { return Ok(None) };
            let member = teams::member(conn, &team.id, &user_id.as_str().into())?;
            let limit = member.and_then(|m| m.budget_micros.or(team.member_budget_micros));
            let recipients = Recipients::Person(user_id.clone());
            limit.map(|limit_micros| Budget {
                limit_micros,
                period: team.policy.budget_period.unwrap_or(BudgetPeriod::Total),
                what: format!("your budget in the team “{}”", team.name),
                team_id: Some(team_id.clone()),
                recipients,
            })
        }
        Subject::Team(team_id) => {
            let Some(team) = teams::find(conn, &team_id.as_str().into())? else { return Ok(None) };
            let recipients = Recipients::Managers(team_id.clone());
            team.policy.max_budget_micros.map(|limit_micros| Budget {
                limit_micros,
                period: team.policy.budget_period.unwrap_or(BudgetPeriod::Total),
                what: format!("the team “{}”", team.name),
                team_id: Some(team_id.clone()),
                recipients,
            })
        }
        Subject::User(user_id) => {
            let Some(user) = users::find_by_id(conn, &user_id.as_str().into())? else {
                return Ok(None);
            };
            user.budget_micros.or(platform.user_budget_micros).map(|limit_micros| Budget {
                limit_micros,
                period: platform.user_budget_period,
                what: "your budget across all your keys".to_owned(),
                team_id: None,
                recipients: Recipients::Known(vec![(user.email, user.name)]),
            })
        }
    };
    Ok(budget.filter(|b| b.limit_micros > 0))
}

/// What one budget's evaluation found: the alerts this node claimed, and for a team its use
/// of its budget (a ratio, for the gauge).
#[derive(Debug, Default)]
pub(super) struct Evaluated {
    pub(super) alerts: Vec<Alert>,
    pub(super) team_use: Option<(String, f64)>,
}

/// Evaluates `subject` at `now` against `thresholds` (ascending percents): claims every
/// threshold its spend reached, and the top one also when it refused a call while holding
/// `refused` micro-USD, at least [`FULL_PERCENT`] of its limit; none claimed yet in this
/// period. Queues the team's webhook delivery of each in the same transaction.
///
/// # Errors
/// On database failure (the alerts of the failed transaction stay unclaimed, and are made by
/// the next signal of the budget).
pub(super) fn evaluate(
    conn: &mut DbConnection,
    subject: &Subject,
    refused: Option<i64>,
    (now, thresholds, platform): (DateTime<Utc>, &[u32], &PlatformSpend),
) -> Result<Evaluated, ServiceError> {
    let Some(budget) = budget_of(conn, subject, platform)? else {
        return Ok(Evaluated::default());
    };
    let from = ledger_from(budget.period, now);
    let spent = budgets::ledger_spend_since(conn, subject.counter(), &from)?;
    #[allow(clippy::cast_precision_loss)]
    let ratio = spent as f64 / budget.limit_micros as f64;
    let top = thresholds.last().copied();
    let counter = subject.counter().name();
    let period = period_name(budget.period, now);
    let claimed = budget_alerts::claimed(conn, &counter, &period)?;
    let mut evaluated = Evaluated {
        team_use: match subject {
            Subject::Team(team_id) => Some((team_id.clone(), ratio)),
            _ => None,
        },
        alerts: Vec::new(),
    };
    for &threshold in thresholds {
        let percent = i32::try_from(threshold).unwrap_or(i32::MAX);
        if claimed.contains(&percent) {
            continue;
        }
        let by_spend =
            i128::from(spent) * 100 >= i128::from(budget.limit_micros) * i128::from(threshold);
        let full = refused.is_some_and(|held| {
            i128::from(held) * 100 >= i128::from(budget.limit_micros) * FULL_PERCENT
        });
        let by_refusal = full && Some(threshold) == top;
        if !(by_spend || by_refusal) {
            continue;
        }
        let row = BudgetAlertRow {
            counter: counter.clone(),
            period: period.clone(),
            threshold: percent,
            scope: subject.scope().as_str().to_owned(),
            team_id: budget.team_id.clone(),
            spent_micros: spent,
            limit_micros: budget.limit_micros,
            created_at: now,
        };
        let alert = Alert {
            subject: subject.clone(),
            row,
            reason: if by_spend { "spent" } else { "refused" },
            held_micros: refused.filter(|_| !by_spend),
            budget_period: budget.period,
            what: budget.what.clone(),
            recipients: Vec::new(),
        };
        if claim(conn, &alert, now)? {
            let recipients = budget.recipients.read(conn)?;
            evaluated.alerts.push(Alert { recipients, ..alert });
        }
    }
    Ok(evaluated)
}

/// Claims `alert` and queues its webhook delivery (when its team has a webhook) in one
/// transaction; whether this call claimed it.
fn claim(conn: &mut DbConnection, alert: &Alert, now: DateTime<Utc>) -> Result<bool, ServiceError> {
    aigw_persistence::transaction(conn, |conn| {
        if !budget_alerts::claim(conn, &alert.row)? {
            return Ok::<_, ServiceError>(false);
        }
        if let Some(team_id) = &alert.row.team_id {
            if webhooks::find(conn, &aigw_domain::TeamId::from(team_id.as_str()))?.is_some() {
                webhooks::enqueue(conn, &alert.delivery(team_id, now))?;
            }
        }
        Ok(true)
    })
}
