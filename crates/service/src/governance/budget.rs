//! Hard budgets per API key: before a call is forwarded, its worst-case cost is
//! reserved atomically against what is left of the key's budget for the current period; after
//! the answer the reservation settles to the real cost (docs/budgets.md).
//!
//! - **Worst case**: the prompt's tokens (counted with the model's tokenizer where the
//!   upstream is known to count with it, else from the request body's bytes:
//!   [`PromptCounting`]) plus `max_completion_tokens` / `max_tokens`, or
//!   [`DEFAULT_COMPLETION_CAP`](crate::dialect::chat::DEFAULT_COMPLETION_CAP) when the request sets neither, at the model's price. An
//!   unpriced model costs 0 (it still cannot pass an exhausted budget).
//! - **Atomicity**: one conditional `UPDATE` of the key's counter row in the database
//!   (`aigw_persistence::budgets`), shared by every node of the cluster; no lock is held
//!   while the call runs.
//!   With `gateway.key_counters = "node"` the counter lives in the node's memory instead
//!   ([`crate::governance::key_counters`]), opened from the ledger: no database write per call; with
//!   `"redis"` in Redis, shared by every node ([`crate::governance::redis_counters`]).
//! - **Settlement**: when the usage recorder turns the call into its ledger record (answer
//!   done, stream ended, failure or cancellation), the difference between the real cost and the
//!   reservation is added to the counter, off the request path.

use crate::db::Db;
use crate::dialect::tokens::PromptCounting;
use crate::error::ServiceError;
use crate::governance::key_counters::{NodeCounters, NodeReserved};
use crate::governance::reservation::{Counter, Reservation};
use crate::levels::LimitLevel;
use crate::prices::PriceTable;
use aigw_domain::usage::{Endpoint, TokenUsage};
use aigw_domain::{BudgetPeriod, LimitScope};
use aigw_persistence::budgets::{self, Reserved};
use chrono::{DateTime, Utc};

/// The counter period of `period` at `now`: the first UTC day (`YYYY-MM-DD`), or `total`.
pub(crate) fn period_name(period: BudgetPeriod, now: DateTime<Utc>) -> String {
    period.start_day(now).map_or_else(|| "total".to_owned(), aigw_domain::usage::format_day)
}

/// The first UTC day (`YYYY-MM-DD`) the ledger counts for `period`'s budget at `now`
/// (`0000-00-00` for `total`: every day), as [`aigw_persistence::budgets`] takes it.
pub(crate) fn ledger_from(period: BudgetPeriod, now: DateTime<Utc>) -> String {
    period.start_day(now).map_or_else(|| "0000-00-00".to_owned(), aigw_domain::usage::format_day)
}

/// How a call's prompt is counted in its worst case besides its model's counting: the
/// endpoint (API dialect) its body is in, and the fewest prompt tokens it counts
/// ([`crate::dialect::RequestSummary::prompt_floor`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptShape {
    /// The endpoint of the body.
    pub endpoint: Endpoint,
    /// The fewest prompt tokens counted.
    pub floor: u64,
}

impl PromptShape {
    /// A chat completion with no floor.
    pub const CHAT: Self = Self { endpoint: Endpoint::Chat, floor: 0 };
}

/// The worst-case token use of a request `body` (of `shape`'s endpoint) whose model's prompt is
/// counted as `counting` says: its prompt's tokens ([`PromptCounting::prompt_tokens`]: the
/// tokenizer's count of messages, tool definitions and response formats where the upstream
/// is known to use that tokenizer, else from the body's bytes, never above `prompt_bound`,
/// the summary's [`crate::dialect::RequestSummary::prompt_bound`], never below `shape.floor`)
/// plus `image_prompt`
/// tokens for its images, and `completion_cap`
/// ([`crate::dialect::RequestSummary::completion_cap`]: the dialect's output cap). With a tokenizer, one parse of the body: the gateway computes it only near a
/// limit.
pub fn worst_case_tokens(
    counting: PromptCounting,
    shape: PromptShape,
    body: &[u8],
    prompt_bound: u64,
    image_prompt: u64,
    completion_cap: u64,
) -> TokenUsage {
    let prompt = counting.prompt_tokens(shape.endpoint, body, prompt_bound).max(shape.floor);
    TokenUsage::new(prompt.saturating_add(image_prompt), completion_cap)
}

/// The budget guard of a node (cheap to clone).
#[derive(Debug, Clone)]
pub struct Budgets {
    db: Db,
    prices: PriceTable,
    /// The node's memory counters, when `gateway.key_counters = "node"`.
    node: Option<NodeCounters>,
    /// The time budget periods are read at (see [`crate::Clock`]).
    clock: crate::Clock,
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

impl Budgets {
    /// A guard over `db`, pricing calls with `prices`.
    pub fn new(db: Db, prices: PriceTable) -> Self {
        Self { db, prices, node: None, clock: crate::Clock::system() }
    }

    /// Reads the current budget period from `clock` (tests move an adjustable one).
    pub fn with_clock(mut self, clock: crate::Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The time the limits read (`Budgets::with_clock`).
    pub(crate) fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }

    /// Keeps the counters in `node`'s memory instead of the database (`gateway.key_counters =
    /// "node"`: one node only).
    pub fn with_node_counters(mut self, node: NodeCounters) -> Self {
        self.node = Some(node);
        self
    }

    /// The most `tokens` (a worst case) can cost with `model`, micro-USD, whatever part of
    /// the prompt the provider's cache reads or writes
    /// ([`aigw_domain::usage::ModelPrice::worst_cost_micros`]); 0 for an unpriced model.
    pub(crate) fn cost_micros(&self, model: &str, tokens: &TokenUsage) -> i64 {
        let cost = self.prices.get(model).map_or(0, |p| p.worst_cost_micros(tokens));
        i64::try_from(cost).unwrap_or(i64::MAX)
    }

    /// The most prompt tokens `images` images cost with `model` (its price's `image_tokens`).
    pub(crate) fn image_prompt(&self, model: &str, images: u64) -> u64 {
        images.saturating_mul(self.prices.image_tokens(model))
    }

    /// The worst-case token use of a call of `model` with `body` ([`worst_case_tokens`] with
    /// the model's [`PromptCounting`], `[[providers]] tokenizers`).
    pub(crate) fn worst_case(
        &self,
        model: &str,
        shape: PromptShape,
        body: &[u8],
        prompt_bound: u64,
        image_prompt: u64,
        completion_cap: u64,
    ) -> TokenUsage {
        let counting = self.prices.prompt_counting(model);
        worst_case_tokens(counting, shape, body, prompt_bound, image_prompt, completion_cap)
    }

    /// The price table the budgets are priced with.
    pub(crate) fn prices(&self) -> &PriceTable {
        &self.prices
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
        let now = self.clock.now();
        let cost = self.prices.get(model).map_or(0, |p| p.worst_cost_micros(worst));
        let period = period_name(budget_period, now);
        let from = ledger_from(budget_period, now);
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

    /// The summary's prompt bound of `body`.
    fn bound(body: &[u8]) -> u64 {
        crate::dialect::chat::validate_chat_request(body)
            .map(|summary| summary.prompt_bound)
            .unwrap_or(0)
    }

    #[test]
    fn worst_case_counts_the_prompt_tools_images_and_the_cap() {
        let tokenizer = PromptCounting::Tokenizer(crate::dialect::tokens::Encoding::Cl100k);
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hello there"}]}"#;
        let worst = worst_case_tokens(tokenizer, PromptShape::CHAT, body, bound(body), 0, 7);
        assert!(worst.prompt_tokens > 2, "{worst:?}");
        assert_eq!(worst.completion_tokens, 7);
        let with_image =
            worst_case_tokens(tokenizer, PromptShape::CHAT, body, bound(body), 2800, 7);
        assert_eq!(with_image.prompt_tokens, worst.prompt_tokens + 2800);
        let tools = br#"{"model":"m","messages":[{"role":"user","content":"hello there"}],
            "tools":[{"type":"function","function":{"name":"lookup","description":"Finds a word in the dictionary","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]}"#;
        let with_tools = worst_case_tokens(tokenizer, PromptShape::CHAT, tools, bound(tools), 0, 7);
        assert!(with_tools.prompt_tokens > worst.prompt_tokens + 20, "{with_tools:?}");
    }

    /// Without a tokenizer known to be the upstream's, the prompt counts a token per byte
    /// (or the configured fraction of one), however few tokens a tokenizer makes of it.
    #[test]
    fn without_the_upstream_s_tokenizer_the_prompt_counts_its_bytes() {
        let text = "the ".repeat(2_000);
        let body = serde_json::to_vec(&serde_json::json!({
            "model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": text}]
        }))
        .unwrap_or_default();
        let tokenizer = PromptCounting::Tokenizer(crate::dialect::tokens::Encoding::Cl100k);
        let counted = worst_case_tokens(tokenizer, PromptShape::CHAT, &body, bound(&body), 0, 1);
        let bytes = worst_case_tokens(
            PromptCounting::ONE_PER_BYTE,
            PromptShape::CHAT,
            &body,
            bound(&body),
            0,
            1,
        );
        assert_eq!(bytes.prompt_tokens, bound(&body));
        assert!(bytes.prompt_tokens > 3 * counted.prompt_tokens, "{bytes:?} {counted:?}");
        let half = PromptCounting::per_byte(0.5).unwrap_or(PromptCounting::ONE_PER_BYTE);
        let halved = worst_case_tokens(half, PromptShape::CHAT, &body, bound(&body), 0, 1);
        let fixed = bound(&body) - body.len() as u64;
        assert_eq!(halved.prompt_tokens, fixed + (body.len() as u64).div_ceil(2));
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
