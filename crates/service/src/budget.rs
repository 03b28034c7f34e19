//! Hard budgets per API key: before a call is forwarded, its worst-case cost is
//! reserved atomically against what is left of the key's budget for the current period; after
//! the answer the reservation settles to the real cost (docs/budgets.md).
//!
//! - **Worst case**: the prompt's tokens (counted with the model's tokenizer, as the ledger
//!   estimates them) plus `max_completion_tokens` / `max_tokens`, or
//!   [`DEFAULT_COMPLETION_CAP`] when the request sets neither, at the model's price. An
//!   unpriced model costs 0 (it still cannot pass an exhausted budget).
//! - **Atomicity**: one conditional `UPDATE` of the key's counter row in the database
//!   (`aigw_persistence::budgets`), shared by every node of the cluster; no lock is held
//!   while the call runs.
//!   With `gateway.key_counters = "node"` the counter lives in the node's memory instead
//!   ([`crate::key_counters`]), opened from the ledger: no database write per call; with
//!   `"redis"` in Redis, shared by every node ([`crate::redis_counters`]).
//! - **Settlement**: when the usage recorder turns the call into its ledger record (answer
//!   done, stream ended, failure or cancellation), the difference between the real cost and the
//!   reservation is added to the counter, off the request path.

use crate::db::Db;
use crate::error::ServiceError;
use crate::key_counters::{NodeCounters, NodeReserved};
use crate::key_leases::{Lease, LeaseCall};
use crate::levels::LimitLevel;
use crate::redis_counters::{RedisAdjuster, RedisHeld};
use crate::usage::prices::PriceTable;
use crate::usage::tokens;
use aigw_domain::usage::TokenUsage;
use aigw_domain::{BudgetPeriod, LimitScope};
use aigw_persistence::budgets::{self, Reserved};
use aigw_persistence::PersistenceError;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};

/// Completion tokens assumed for a request that sets no `max_tokens`.
pub const DEFAULT_COMPLETION_CAP: u64 = 4096;

/// The counter period of `period` at `now`: the first UTC day (`YYYY-MM-DD`), or `total`.
pub(crate) fn period_name(period: BudgetPeriod, now: DateTime<Utc>) -> String {
    period.start_day(now).map_or_else(|| "total".to_owned(), aigw_domain::usage::format_day)
}

/// The worst-case token use of a chat request for `model`: the prompt's tokens counted with
/// the model's tokenizer ([`tokens::count_prompt`]: messages, tool definitions, response
/// formats) plus `image_prompt` tokens for its images, and `completion_cap`
/// ([`crate::chat_request::ChatRequestSummary::completion_cap`]: the completion cap times `n`).
/// One parse of the body: the gateway computes it only near a limit.
pub fn worst_case_tokens(
    model: &str,
    body: &[u8],
    image_prompt: u64,
    completion_cap: u64,
) -> TokenUsage {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let prompt = tokens::count_prompt(tokens::encoding_for_model(model), &parsed);
    TokenUsage::new(prompt.saturating_add(image_prompt), completion_cap)
}

/// The budget guard of a node (cheap to clone).
#[derive(Debug, Clone)]
pub struct Budgets {
    db: Db,
    prices: PriceTable,
    /// The node's memory counters, when `gateway.key_counters = "node"`.
    node: Option<NodeCounters>,
}

/// One call's reservation to make: the key, its budget and period, the worst-case cost.
#[derive(Debug, Clone)]
pub(crate) struct BudgetPlan {
    /// The level whose budget this is.
    pub(crate) scope: LimitScope,
    /// The counter's name (the key id, or a team's or member's [`aigw_domain::CounterSubject`]).
    pub(crate) key_id: String,
    budget_period: BudgetPeriod,
    /// The period's first UTC day (`YYYY-MM-DD`), or `total`.
    pub(crate) period: String,
    /// The first UTC day the ledger counts for the period (`0000-00-00` for `total`).
    pub(crate) from: String,
    /// The worst case, micro-USD.
    pub(crate) cost: i64,
    /// `max_budget_micros`.
    pub(crate) limit: i64,
    /// Micro-USD of the budget the reservation must leave free (0: all of it may be used); an
    /// upper-bound reservation keeps room for more such calls (see [`Budgets::reserve_bounded`]).
    pub(crate) room: i64,
    now: DateTime<Utc>,
}

impl BudgetPlan {
    /// The counter's name with the period kind (`daily/2026-11-22`): a PATCH of the period
    /// names a new counter, one of the limit alone keeps it (what a counter holds, spend and
    /// running calls, does not depend on the limit).
    pub(crate) fn qualified(&self) -> String {
        format!("{}/{}", self.budget_period.as_str(), self.period)
    }

    /// What [`Self::qualified`] names, as values: period kind, period and limit (compared per
    /// call by the leases without writing the name).
    pub(crate) fn terms(&self) -> (BudgetPeriod, String, i64) {
        (self.budget_period, self.period.clone(), self.limit)
    }

    /// The refusal, with `spent` micro-USD committed now.
    pub(crate) fn refused(&self, spent: i64) -> ServiceError {
        let reset = self.budget_period.reset_at(self.now);
        // Seconds until the period ends; a `total` budget never resets: a day.
        let retry_after_secs = reset
            .map_or(86_400, |r| u64::try_from((r - self.now).num_seconds()).unwrap_or(1))
            .max(1);
        ServiceError::BudgetExceeded {
            scope: self.scope,
            limit_micros: self.limit,
            spent_micros: spent,
            reserved_micros: self.cost,
            reset: reset.map(|r| r.timestamp()),
            retry_after_secs,
        }
    }
}

/// Where a reservation was counted.
#[derive(Debug)]
enum Counter {
    /// A database counter row, by its period name.
    Database(Db, String),
    /// The node's memory: the period's name.
    Node(NodeCounters, String),
    /// Redis: the budget counter and the rate window, settled by one script.
    Redis(RedisHeld),
    /// A node's lease ([`crate::key_leases`]): the call's bound was taken from it and its
    /// settlement goes back into it.
    Lease(LeaseCall),
}

/// A reservation of a call's worst-case cost; settled by [`Reservation::settle`] (a dropped
/// reservation stays charged at its worst case).
#[derive(Debug)]
pub struct Reservation {
    counter: Counter,
    key_id: String,
    /// The micro-USD it holds: its worst case, lowered by [`Tightener::tighten_to`]; swapped
    /// for [`SETTLED`] by the settlement, so that each difference is applied once.
    reserved: Arc<AtomicI64>,
}

/// What a settled reservation holds (never a real amount).
const SETTLED: i64 = i64::MIN;

/// Lowers a running call's reservation from its upper bound to its exact worst case, from
/// outside the call (the node's list of calls admitted at a bound, [`crate::key_limits`]).
#[derive(Debug)]
pub(crate) struct Tightener {
    reserved: Weak<AtomicI64>,
    target: TightenTarget,
}

/// Where a tightened reservation gives back.
#[derive(Debug)]
enum TightenTarget {
    Database(Db, String, String),
    Node(NodeCounters, String, String),
    Redis(RedisAdjuster),
    /// A call taken from a lease: the lease's grant and its reservation in the counters are
    /// lowered by as much.
    Lease(Weak<Lease>),
}

impl Tightener {
    /// Whether the call still runs (its reservation is neither settled nor dropped).
    pub(crate) fn is_running(&self) -> bool {
        self.reserved.upgrade().is_some_and(|r| r.load(Ordering::Acquire) != SETTLED)
    }

    /// Lowers the reservation to `exact` micro-USD, when it still holds more and is not
    /// settled; returns the micro-USD given back to the counter (0 when nothing changed). The
    /// counter is written before this returns.
    pub(crate) async fn tighten_to(&self, exact: i64) -> i64 {
        let Some(reserved) = self.reserved.upgrade() else {
            return 0;
        };
        let current = reserved.load(Ordering::Acquire);
        if current == SETTLED || exact >= current {
            return 0;
        }
        self.lower(&reserved, current, exact).await
    }

    /// Lowers what the reservation holds by `by` micro-USD (not below 0); returns what was
    /// given back.
    async fn give_back(&self, by: i64) -> i64 {
        let Some(reserved) = self.reserved.upgrade() else {
            return 0;
        };
        let current = reserved.load(Ordering::Acquire);
        if current == SETTLED || by <= 0 {
            return 0;
        }
        self.lower(&reserved, current, current.saturating_sub(by).max(0)).await
    }

    /// Moves the reservation from `current` to `lower` (if nothing else moved it meanwhile)
    /// and gives the difference back to its counter.
    async fn lower(&self, reserved: &AtomicI64, current: i64, lower: i64) -> i64 {
        if reserved.compare_exchange(current, lower, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return 0;
        }
        let delta = lower - current;
        match &self.target {
            TightenTarget::Database(db, key_id, period) => {
                let (key_id, period) = (key_id.clone(), period.clone());
                let written =
                    db.run(move |conn| Ok(budgets::settle(conn, &key_id, &period, delta)?)).await;
                if let Err(e) = written {
                    // The counter keeps the bound: it refuses early, never admits too much.
                    tracing::warn!(error = %e, "tightening a reservation failed");
                    return 0;
                }
            }
            TightenTarget::Node(node, key_id, period) => node.settle(key_id, period, delta),
            TightenTarget::Redis(adjuster) => {
                if !adjuster.adjust(delta).await {
                    return 0;
                }
            }
            TightenTarget::Lease(lease) => {
                let Some(lease) = lease.upgrade() else {
                    return 0;
                };
                lease.lower_grant(-delta);
                return match lease.tightener() {
                    Some(lease_reservation) => Box::pin(lease_reservation.give_back(-delta)).await,
                    None => 0,
                };
            }
        }
        -delta
    }
}

/// Runs `write` (a settlement) on the database in the background, logging a failure: the
/// reservation then stays counted at its worst case. Nothing runs outside a tokio runtime.
pub(crate) fn settle_in_background<F>(db: Db, what: &'static str, write: F)
where
    F: FnOnce(&mut aigw_persistence::DbConnection) -> Result<(), PersistenceError> + Send + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        if let Err(e) = db.run(move |conn| Ok(write(conn)?)).await {
            tracing::warn!(error = %e, what, "settlement failed; the reservation stays counted");
        }
    });
}

impl Reservation {
    fn new(counter: Counter, key_id: String, reserved_micros: i64) -> Self {
        Self { counter, key_id, reserved: Arc::new(AtomicI64::new(reserved_micros)) }
    }

    /// The micro-USD this reservation holds (the call's worst case; 0 for a reservation of
    /// tokens alone).
    pub(crate) fn reserved_micros(&self) -> u64 {
        u64::try_from(self.reserved.load(Ordering::Acquire)).unwrap_or(0)
    }

    /// The micro-USD to settle against, taken once (a second take reads 0).
    fn take(&self) -> i64 {
        match self.reserved.swap(SETTLED, Ordering::AcqRel) {
            SETTLED => 0,
            held => held,
        }
    }

    /// A handle that can lower this reservation to the call's exact worst case while the
    /// call runs; `None` for a call admitted from a lease (its lease gives back instead).
    pub(crate) fn tightener(&self) -> Option<Tightener> {
        let target = match &self.counter {
            Counter::Database(db, period) => {
                TightenTarget::Database(db.clone(), self.key_id.clone(), period.clone())
            }
            Counter::Node(node, period) => {
                TightenTarget::Node(node.clone(), self.key_id.clone(), period.clone())
            }
            Counter::Redis(held) => TightenTarget::Redis(held.adjuster()?),
            Counter::Lease(call) => TightenTarget::Lease(call.lease()),
        };
        Some(Tightener { reserved: Arc::downgrade(&self.reserved), target })
    }

    /// Gives the whole reservation back at once (a call admitted by its budget but refused by
    /// its rate limit); a failed write leaves it counted, as a failed settlement does.
    pub(crate) async fn release(self) {
        let reserved_micros = self.take();
        let Reservation { counter, key_id, .. } = self;
        match counter {
            Counter::Database(db, period) => {
                let released = db
                    .run(move |conn| Ok(budgets::settle(conn, &key_id, &period, -reserved_micros)?))
                    .await;
                if let Err(e) = released {
                    tracing::warn!(error = %e, "releasing a reservation failed; it stays counted");
                }
            }
            Counter::Node(node, period) => node.settle(&key_id, &period, -reserved_micros),
            Counter::Redis(held) => held.settle(-reserved_micros, 0, 0, 0),
            Counter::Lease(call) => call.settle(reserved_micros, 0, 0),
        }
    }

    /// A call admitted from a node's lease: `reserved_micros` is its bound's cost.
    pub(crate) fn from_lease(key_id: String, reserved_micros: i64, call: LeaseCall) -> Self {
        Self::new(Counter::Lease(call), key_id, reserved_micros)
    }

    /// Settles a whole lease: `used_micros` and `used_tokens` are what its calls took (settled
    /// calls at their real cost and tokens, the others at their bound); `unused_requests` go
    /// back to a Redis rate window (the database's are given back by
    /// [`crate::key_rates::KeyRates::give_back_requests`]). In the background.
    pub(crate) fn settle_lease(self, used_micros: i64, used_tokens: u64, unused_requests: i64) {
        let delta = used_micros - self.take();
        let Reservation { counter, key_id, .. } = self;
        match counter {
            Counter::Redis(held) => held.settle(delta, used_micros, used_tokens, unused_requests),
            _ if delta == 0 => {}
            Counter::Database(db, period) => settle_in_background(db, "budget", move |conn| {
                budgets::settle(conn, &key_id, &period, delta)
            }),
            Counter::Node(node, period) => node.settle(&key_id, &period, delta),
            // Leases are never leased from.
            Counter::Lease(_) => {}
        }
    }

    /// A reservation counted in Redis (`reserved_micros`: the budget's part, 0 without one).
    pub(crate) fn in_redis(key_id: String, reserved_micros: i64, held: RedisHeld) -> Self {
        Self::new(Counter::Redis(held), key_id, reserved_micros)
    }

    /// Settles to the real cost `cost_micros` and, for a reservation in Redis that also holds
    /// the call's rate window, its real `total_tokens`; in the background (never blocks the
    /// caller).
    pub(crate) fn settle(self, cost_micros: u64, total_tokens: u64) {
        let cost = i64::try_from(cost_micros).unwrap_or(i64::MAX);
        let reserved = self.take();
        let delta = cost - reserved;
        let Reservation { counter, key_id, .. } = self;
        match counter {
            Counter::Redis(held) => held.settle(delta, cost, total_tokens, 0),
            Counter::Lease(call) => call.settle(reserved, cost_micros, total_tokens),
            _ if delta == 0 => {}
            Counter::Database(db, period) => settle_in_background(db, "budget", move |conn| {
                budgets::settle(conn, &key_id, &period, delta)
            }),
            Counter::Node(node, period) => node.settle(&key_id, &period, delta),
        }
    }
}

impl Budgets {
    /// A guard over `db`, pricing calls with `prices`.
    pub fn new(db: Db, prices: PriceTable) -> Self {
        Self { db, prices, node: None }
    }

    /// Keeps the counters in `node`'s memory instead of the database (`gateway.key_counters =
    /// "node"`: one node only).
    pub fn with_node_counters(mut self, node: NodeCounters) -> Self {
        self.node = Some(node);
        self
    }

    /// The cost of `tokens` with `model`, micro-USD (0 for an unpriced model).
    pub(crate) fn cost_micros(&self, model: &str, tokens: &TokenUsage) -> i64 {
        let cost = self.prices.get(model).map_or(0, |p| p.cost_micros(tokens));
        i64::try_from(cost).unwrap_or(i64::MAX)
    }

    /// The most prompt tokens `images` images cost with `model` (its price's `image_tokens`).
    pub(crate) fn image_prompt(&self, model: &str, images: u64) -> u64 {
        images.saturating_mul(self.prices.image_tokens(model))
    }

    /// The reservation a call of `model` with worst-case token use `worst` needs at `level`
    /// (`None`: the level has no budget).
    pub(crate) fn plan(
        &self,
        level: &LimitLevel<'_>,
        model: &str,
        worst: &TokenUsage,
    ) -> Option<BudgetPlan> {
        let policy = level.policy;
        let limit = policy.max_budget_micros?;
        let budget_period = policy.budget_period.unwrap_or(BudgetPeriod::Total);
        let now = aigw_domain::time::now();
        let cost = self.prices.get(model).map_or(0, |p| p.cost_micros(worst));
        let period = period_name(budget_period, now);
        let from = if budget_period == BudgetPeriod::Total {
            "0000-00-00".to_owned()
        } else {
            period.clone()
        };
        Some(BudgetPlan {
            scope: level.scope,
            key_id: level.counter.to_owned(),
            budget_period,
            period,
            from,
            cost: i64::try_from(cost).unwrap_or(i64::MAX),
            limit,
            room: 0,
            now,
        })
    }

    /// Makes the reservation `plan` in the node's memory or the database.
    pub(crate) async fn reserve_planned(
        &self,
        plan: BudgetPlan,
    ) -> Result<Reservation, ServiceError> {
        match &self.node {
            Some(node) => self.reserve_on_node(node, plan).await,
            None => {
                let name = plan.period.clone();
                self.reserve_in_database(plan, name).await
            }
        }
    }

    /// Reserves `plan` (an upper bound of the call's cost) only if `plan.room` micro-USD of the
    /// budget stay free after it; `None` (nothing reserved) when they would not: the caller
    /// then counts the call exactly and reserves with [`Budgets::reserve_planned`].
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub(crate) async fn reserve_bounded(
        &self,
        plan: BudgetPlan,
    ) -> Result<Option<Reservation>, ServiceError> {
        match self.reserve_planned(plan).await {
            Ok(reservation) => Ok(Some(reservation)),
            Err(ServiceError::BudgetExceeded { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Where a counter of key `key_id` opens (micro-USD): what it spent from UTC day `from`
    /// on, from the ledger's daily rollups, plus the reservations of its calls in flight
    /// ([`budgets::committed_since`]).
    pub(crate) async fn opening_spend(
        &self,
        key_id: &str,
        from: &str,
    ) -> Result<i64, ServiceError> {
        let (key, from) = (key_id.to_owned(), from.to_owned());
        self.db.run(move |conn| Ok(budgets::committed_since(conn, &key, &from)?)).await
    }

    /// One conditional `UPDATE` of the key's counter row named `name` (opened from the ledger
    /// when missing).
    pub(crate) async fn reserve_in_database(
        &self,
        plan: BudgetPlan,
        name: String,
    ) -> Result<Reservation, ServiceError> {
        let (key, period, from) = (plan.key_id.clone(), name.clone(), plan.from.clone());
        let (cost, limit) = (plan.cost, plan.limit.saturating_sub(plan.room));
        let outcome = self
            .db
            .run(move |conn| {
                let mut outcome = budgets::reserve(conn, &key, &period, cost, limit)?;
                if outcome == Reserved::NoCounter {
                    let spent = budgets::committed_since(conn, &key, &from)?;
                    budgets::open_period(conn, &key, &period, spent)?;
                    outcome = budgets::reserve(conn, &key, &period, cost, limit)?;
                }
                Ok(outcome)
            })
            .await?;
        finish(plan, outcome, Counter::Database(self.db.clone(), name))
    }

    /// A check-and-add in the node's memory; the database is read (the ledger) only to open
    /// the counter.
    async fn reserve_on_node(
        &self,
        node: &NodeCounters,
        plan: BudgetPlan,
    ) -> Result<Reservation, ServiceError> {
        // In memory a PATCH of the period is seen as a new name: a daily and a weekly period
        // can share their first day, so the name carries the kind (a new limit alone keeps the
        // counter).
        let period = format!("{}/{}", plan.budget_period.as_str(), plan.period);
        let (key_id, cost, limit) = (plan.key_id.as_str(), plan.cost, plan.limit);
        let mut outcome = node.reserve(key_id, &period, cost, (limit, plan.room));
        if outcome == NodeReserved::NotOpen {
            let spent = self.opening_spend(key_id, &plan.from).await?;
            node.open(key_id, &period, spent);
            outcome = node.reserve(key_id, &period, cost, (limit, plan.room));
        }
        let outcome = match outcome {
            NodeReserved::Yes => Reserved::Yes(0),
            NodeReserved::No(spent) => Reserved::No(spent),
            NodeReserved::NotOpen => Reserved::NoCounter,
        };
        finish(plan, outcome, Counter::Node(node.clone(), period))
    }
}

/// The reservation of `plan` counted in `counter`, or its refusal.
fn finish(
    plan: BudgetPlan,
    outcome: Reserved,
    counter: Counter,
) -> Result<Reservation, ServiceError> {
    match outcome {
        Reserved::Yes(_) => Ok(Reservation::new(counter, plan.key_id, plan.cost)),
        Reserved::No(spent) => Err(plan.refused(spent)),
        // Created just before and never deleted meanwhile but by a concurrent PATCH.
        Reserved::NoCounter => {
            Err(ServiceError::Unavailable("the budget counter vanished; retry".to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_case_counts_the_prompt_tools_images_and_the_cap() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hello there"}]}"#;
        let worst = worst_case_tokens("m", body, 0, 7);
        assert!(worst.prompt_tokens > 2, "{worst:?}");
        assert_eq!(worst.completion_tokens, 7);
        let with_image = worst_case_tokens("m", body, 2800, 7);
        assert_eq!(with_image.prompt_tokens, worst.prompt_tokens + 2800);
        let tools = br#"{"model":"m","messages":[{"role":"user","content":"hello there"}],
            "tools":[{"type":"function","function":{"name":"lookup","description":"Finds a word in the dictionary","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]}"#;
        let with_tools = worst_case_tokens("m", tools, 0, 7);
        assert!(with_tools.prompt_tokens > worst.prompt_tokens + 20, "{with_tools:?}");
    }

    #[test]
    fn counter_periods_are_named_by_their_first_day() {
        let now = DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        assert_eq!(period_name(BudgetPeriod::Daily, now), "2026-11-22");
        assert_eq!(period_name(BudgetPeriod::Weekly, now), "2026-11-16");
        assert_eq!(period_name(BudgetPeriod::Monthly, now), "2026-11-01");
        assert_eq!(period_name(BudgetPeriod::Total, now), "total");
    }
}
