//! A call's admission against its key's own limits (issue 9): the rpm/tpm window
//! ([`crate::key_rates`]) and the budget ([`crate::budget`]), with the call's worst case
//! computed once ([`worst_case_tokens`]: one parse of the body and one token count) and
//! counted where `gateway.key_counters` says: the database, the node's memory, or Redis (one
//! script for both, the database while Redis is unavailable).

use crate::auth::Principal;
use crate::budget::{worst_case_tokens, Budgets, Reservation};
use crate::error::ServiceError;
use crate::key_rates::{KeyRates, RatePlan, RateStatus, TokenReservation};
use crate::redis_counters::{RedisCounters, FALLBACK_PREFIX};
use aigw_domain::usage::TokenUsage;

/// The key limits of a node (cheap to clone).
#[derive(Debug, Clone)]
pub struct KeyLimits {
    budgets: Budgets,
    rates: KeyRates,
    redis: Option<RedisCounters>,
}

/// What an admitted call holds: where its key stands for the `x-ratelimit-*` headers (`None`:
/// no rpm/tpm limit), and its reservations, settled when the call is recorded.
#[derive(Debug, Default)]
pub struct Admission {
    /// The key's window after this call, when it has an `rpm_limit` or a `tpm_limit`.
    pub status: Option<RateStatus>,
    /// The budget's reservation (in Redis: also the call's tokens).
    pub reservation: Option<Reservation>,
    /// The tokens reserved in the database or memory window (with a `tpm_limit`).
    pub tokens: Option<TokenReservation>,
}

impl KeyLimits {
    /// Limits counted by `budgets` and `rates` (each in the database or the node's memory).
    pub fn new(budgets: Budgets, rates: KeyRates) -> Self {
        Self { budgets, rates, redis: None }
    }

    /// Counts in Redis (`gateway.key_counters = "redis"`); `budgets` and `rates` (database
    /// counters) then serve while Redis is unavailable.
    pub fn with_redis(mut self, redis: RedisCounters) -> Self {
        self.redis = Some(redis);
        self
    }

    /// Admits `principal`'s call of `model` with request `body`.
    ///
    /// # Errors
    /// [`ServiceError::RateLimited`] when the key's `rpm_limit` or `tpm_limit` cannot take
    /// the call, [`ServiceError::BudgetExceeded`] when its budget cannot;
    /// [`ServiceError::Unavailable`] when the counters' database is down.
    pub async fn admit(
        &self,
        principal: &Principal,
        model: &str,
        body: &[u8],
    ) -> Result<Admission, ServiceError> {
        let Some(policy) = principal.key_policy() else {
            return Ok(Admission::default());
        };
        let priced = policy.max_budget_micros.is_some() || policy.tpm_limit.is_some();
        if !priced && policy.rpm_limit.is_none() {
            return Ok(Admission::default());
        }
        let worst = if priced { worst_case_tokens(model, body) } else { TokenUsage::default() };
        let budget = self.budgets.plan(principal, model, &worst);
        let rates = RatePlan::new(principal, &worst);
        let fallback = match &self.redis {
            None => false,
            Some(redis) => {
                match redis.admit(&self.budgets, budget.as_ref(), rates.as_ref()).await {
                    Some(admitted) => {
                        let (status, reservation) = admitted?;
                        return Ok(Admission {
                            status,
                            reservation: Some(reservation),
                            tokens: None,
                        });
                    }
                    None => {
                        redis.count_fallback();
                        true
                    }
                }
            }
        };
        let (status, tokens) = match rates {
            Some(plan) => {
                let (status, tokens) = self.rates.admit_planned(plan).await?;
                (Some(status), tokens)
            }
            None => (None, None),
        };
        let reservation = match budget {
            // Redis is unavailable: the database counters, never "unlimited". The budget
            // counts in a row of its own, which the first node back on Redis reconciles.
            Some(plan) if fallback => {
                let name = format!("{FALLBACK_PREFIX}{}", plan.qualified());
                Some(self.budgets.reserve_in_database(plan, name).await?)
            }
            Some(plan) => Some(self.budgets.reserve_planned(plan).await?),
            None => None,
        };
        Ok(Admission { status, reservation, tokens })
    }
}
