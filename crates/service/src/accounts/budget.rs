//! A user's own budget across all their keys, as they read it: the limit that applies (their
//! own, set by admins, else the platform's `gateway.user_budget_usd`), its period, and what
//! they spent in it from the ledger (docs/budgets.md "A user's budget").

use crate::accounts::Accounts;
use crate::auth::Authorized;
use crate::error::ServiceError;
use aigw_domain::access::op;
use aigw_domain::{BudgetPeriod, CounterSubject};
use aigw_persistence::budgets;
use chrono::{DateTime, Utc};

/// Where a user's budget comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetSource {
    /// Set for this user by an admin.
    Own,
    /// The platform's `gateway.user_budget_usd`.
    Platform,
}

/// A user's budget across all their keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserBudgetView {
    /// The limit per period, micro-USD (`None`: no budget applies).
    pub limit_micros: Option<i64>,
    /// Where the limit comes from (`None` with no limit).
    pub source: Option<BudgetSource>,
    /// The period (the platform's `gateway.user_budget_period`).
    pub period: BudgetPeriod,
    /// What the user's keys spent in the current period (ever, for `total`), team keys
    /// excepted, micro-USD, from the ledger.
    pub spent_micros: i64,
    /// When the period ends, UTC (`None` for `total`).
    pub reset_at: Option<DateTime<Utc>>,
}

impl Accounts {
    /// The caller's budget across all their keys, and what they spent in its period.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] when the account no longer exists;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn user_budget(
        &self,
        principal: &Authorized<op::ReadUsage>,
    ) -> Result<UserBudgetView, ServiceError> {
        let user = self
            .cache
            .user(principal.user_id())
            .await?
            .ok_or_else(|| ServiceError::revoked_credential("the account no longer exists"))?;
        let platform = self.spend.clone();
        let (limit_micros, source) = match (user.budget_micros, platform.user_budget_micros) {
            (Some(own), _) => (Some(own), Some(BudgetSource::Own)),
            (None, Some(default)) => (Some(default), Some(BudgetSource::Platform)),
            (None, None) => (None, None),
        };
        let now = self.clock.now();
        let period = platform.user_budget_period;
        let from = crate::governance::budget::ledger_from(period, now);
        let user_id = user.id.to_string();
        let spent_micros = self
            .db
            .run(move |conn| {
                Ok(budgets::ledger_spend_since(conn, CounterSubject::User(&user_id), &from)?)
            })
            .await?;
        Ok(UserBudgetView {
            limit_micros,
            source,
            period,
            spent_micros,
            reset_at: period.reset_at(now),
        })
    }
}
