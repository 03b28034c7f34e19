//! A call's admission against its key's own limits: the rpm/tpm window
//! ([`crate::governance::key_rates`]) and the budget ([`crate::governance::budget`]), with the call's worst case
//! computed from one parse of the body (an upper bound first with Redis counters, the
//! model's prompt count near a limit: [`BOUND_HEADROOM`],
//! [`crate::governance::budget::worst_case_tokens`]) and counted where `gateway.key_counters`
//! says: the database, the node's memory, or Redis (one script for both, the database while
//! Redis is unavailable). Far from the limits, calls are admitted from the
//! node's lease of the database's or Redis' counters ([`crate::governance::key_leases`]).

use crate::auth::Principal;
use crate::config::GatewayConfig;
use crate::db::Db;
use crate::dialect::summary::RequestSummary;
use crate::error::ServiceError;
use crate::governance::admission::{Admission, BOUND_HEADROOM};
use crate::governance::budget::{BudgetPlan, Budgets, PromptShape};
use crate::governance::key_counters::{KeyCounters, NodeCounters};
use crate::governance::key_leases::{Granted, Leases, LEASE_TTL};
use crate::governance::key_rates::{KeyRates, RatePlan, RateStatus};
use crate::governance::redis_counters::{RedisAdmission, RedisCounters, FALLBACK_PREFIX};
use crate::governance::reservation::Tightener;
use crate::levels::LimitLevel;
use crate::prices::PriceTable;
use crate::rate_limit::RateLimitConfig;
use crate::redis_link::RedisLink;
use crate::spend_signal::{Refusal, SpendSignal, SpendSignals};
use aigw_domain::usage::TokenUsage;
use aigw_domain::BudgetMode;
use bytes::Bytes;
use dashmap::DashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the ledger's writes may take beyond the flush interval (see [`SpendGovernance::from_config`]).
const LEDGER_WRITE_MARGIN: Duration = Duration::from_millis(250);

/// The key limits of a node (cheap to clone).
#[derive(Debug, Clone)]
pub struct SpendGovernance {
    budgets: Budgets,
    rates: KeyRates,
    redis: Option<RedisCounters>,
    leases: Option<Leases>,
    /// Per key, this node's running calls admitted at an upper bound (lowered to their exact
    /// worst case when the key's budget refuses a call: [`SpendGovernance::tighten`]).
    bounded: Arc<DashMap<String, Vec<BoundCall>>>,
    /// Per key, held while its bounded calls are tightened: calls refused meanwhile wait for
    /// the room it makes.
    tightening: Arc<DashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Told which level's budget refused a call (for budget alerts).
    signals: SpendSignals,
}

/// A running call admitted at an upper bound of its worst case, and what its exact worst case
/// is computed from (the model is read from the body then: nothing is copied per call).
#[derive(Debug)]
struct BoundCall {
    tightener: Tightener,
    shape: PromptShape,
    body: Bytes,
    prompt_bound: u64,
    image_prompt: u64,
    completion_cap: u64,
}

/// A call as admission sees it: its model and endpoint, its body, its bound (the prompt's
/// upper bound and the output cap: [`RequestSummary`]'s `prompt_bound` and
/// `completion_cap`) and its images.
#[derive(Clone, Copy)]
struct Asked<'a> {
    model: &'a str,
    shape: PromptShape,
    body: &'a Bytes,
    bound: TokenUsage,
    images: u64,
    /// Set once the call was counted as decided without Redis: a call counts once, however
    /// many levels and attempts (a refusal tried again after tightening, a clamp) it takes.
    fallback_counted: &'a AtomicBool,
}

impl<'a> Asked<'a> {
    fn new(summary: &'a RequestSummary, body: &'a Bytes, counted: &'a AtomicBool) -> Self {
        Self {
            model: &summary.model,
            shape: PromptShape { endpoint: summary.endpoint, floor: summary.prompt_floor },
            body,
            bound: TokenUsage::new(summary.prompt_bound, summary.completion_cap),
            images: summary.images,
            fallback_counted: counted,
        }
    }
}

/// The `model` of a request body (validated before it was admitted).
fn model_of(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Model {
        model: String,
    }
    serde_json::from_slice::<Model>(body).map(|m| m.model).unwrap_or_default()
}

/// Bounded calls kept per key before the finished ones are dropped from the list.
const BOUND_CALLS_KEPT: usize = 256;

/// Calls of a budget at least this many times their upper bound are not noted for tightening:
/// the bounds of the calls running at once near its end (the leases' and
/// [`BOUND_HEADROOM`]'s, a few hundred bounds) are then a small part of it, and such a key
/// (the usual large budget) pays nothing per call for the notes.
const NOTED_BELOW_CALLS: i64 = 4096;

/// A call as one level's admission sees it: its model and body, whether the level prices it
/// (a budget or a `tpm_limit`), and its bound (the prompt's bound plus its images' tokens, and
/// the completion cap; nothing when not priced).
struct LevelCall<'a> {
    level: &'a LimitLevel<'a>,
    model: &'a str,
    shape: PromptShape,
    body: &'a Bytes,
    priced: bool,
    prompt_bound: u64,
    image_prompt: u64,
    bound: TokenUsage,
    fallback_counted: &'a AtomicBool,
}

impl LevelCall<'_> {
    /// The call's worst case with its prompt counted as its model says (near a limit only:
    /// with a tokenizer, a parse of the body); nothing when not priced.
    fn exact(&self, budgets: &Budgets) -> TokenUsage {
        if !self.priced {
            return TokenUsage::default();
        }
        let cap = self.bound.completion_tokens;
        budgets.worst_case(
            self.model,
            self.shape,
            self.body,
            self.prompt_bound,
            self.image_prompt,
            cap,
        )
    }

    /// What `SpendGovernance::note_bounded` keeps of a call admitted at its bound.
    fn noted(&self) -> (PromptShape, &Bytes, u64, u64, u64) {
        (self.shape, self.body, self.prompt_bound, self.image_prompt, self.bound.completion_tokens)
    }
}

/// What an admission in Redis decided.
enum InRedis {
    /// Admitted, with what it holds (boxed: the other answers carry nothing).
    Admitted(Box<Admission>),
    /// Redis is unavailable: the database counters serve.
    Unavailable,
    /// Neither (no attempt decided).
    Undecided,
}

/// Whether a call reserving `plan` is noted for [`SpendGovernance::tighten`]: its key has a budget
/// of fewer than [`NOTED_BELOW_CALLS`] such calls.
fn worth_noting(plan: Option<&BudgetPlan>) -> bool {
    plan.is_some_and(|p| p.limit / p.cost.max(1) < NOTED_BELOW_CALLS)
}

/// What a call holds at one level: its budget reservation and its `tpm_limit` reservation.
pub(crate) type Held = (
    Option<crate::governance::reservation::Reservation>,
    Option<crate::governance::key_rates::TokenReservation>,
);

/// What an admitted call holds at every level it counts against (its key, member and team):
/// where it stands for the `x-ratelimit-*` headers, and each level's reservations, settled
/// when the call is recorded.
#[derive(Debug, Default)]
pub struct Admitted {
    /// The first level's window after this call (the key's, else the team's), when it has an
    /// `rpm_limit` or a `tpm_limit`.
    pub status: Option<RateStatus>,
    /// Each limited level's admission, key first.
    pub levels: Vec<Admission>,
    /// The request body to send instead of the caller's, with its summary, when a budget in
    /// `clamp` mode lowered its `max_tokens` ([`crate::governance::clamp`]).
    pub clamped: Option<(Bytes, RequestSummary)>,
}

impl SpendGovernance {
    /// The key limits of a node as configured: budgets priced with `prices` and rpm/tpm
    /// windows, counted where `gateway.key_counters` says (docs/budgets.md "Where the counters
    /// live"): in `db`; in this node's memory (`node`: one node only); or in Redis over the
    /// link `redis_link` gives (asked for only then, so that it can be the one the rate limiter
    /// shares), named under `rate_limit.redis_key_prefix`, with the database's counters while
    /// Redis is unavailable. Except in the node's memory, calls far from their limits are
    /// admitted from leases of `gateway.key_lease_calls` calls' worth. `flush_interval`
    /// (`usage.flush_interval_ms`) bounds how long the ledger lags behind the admissions, which
    /// Redis counters wait out before they reopen from it after a failover.
    ///
    /// # Errors
    /// What `redis_link` fails with.
    pub fn from_config<E>(
        db: Db,
        gateway: &GatewayConfig,
        rate_limit: &RateLimitConfig,
        prices: PriceTable,
        flush_interval: Duration,
        redis_link: impl FnOnce() -> Result<RedisLink, E>,
    ) -> Result<Self, E> {
        let mut budgets = Budgets::new(db.clone(), prices);
        let mut rates = KeyRates::new(db.clone());
        let mut redis = None;
        match gateway.key_counters {
            KeyCounters::Database => {}
            KeyCounters::Node => {
                // One node only: the counters in this process's memory.
                let node = NodeCounters::new();
                budgets = budgets.with_node_counters(node.clone());
                rates = rates.with_node_counters(node);
            }
            KeyCounters::Redis => {
                // Shared by every node; the database counters serve while Redis is down.
                // Every admission is in the database one flush, one lease and the writes
                // after it was made: counters reopen from the ledger no sooner after the
                // counting moved.
                let ledger_lag = flush_interval + LEASE_TTL + LEDGER_WRITE_MARGIN;
                let prefix = &rate_limit.redis_key_prefix;
                redis = Some(RedisCounters::new(redis_link()?, prefix, db, ledger_lag));
            }
        }
        let mut limits = Self::new(budgets, rates);
        if let Some(redis) = redis {
            limits = limits.with_redis(redis);
        }
        if gateway.key_counters != KeyCounters::Node {
            limits = limits.with_leases(gateway.key_lease_calls);
        }
        Ok(limits)
    }

    /// Reads the time (budget periods, rate windows) from `clock` (tests move an adjustable
    /// one instead of waiting for a minute to begin).
    pub fn with_clock(mut self, clock: crate::Clock) -> Self {
        self.budgets = self.budgets.with_clock(clock);
        self
    }

    /// Limits counted by `budgets` and `rates` (each in the database or the node's memory).
    pub fn new(budgets: Budgets, rates: KeyRates) -> Self {
        Self {
            budgets,
            rates,
            redis: None,
            leases: None,
            bounded: Arc::default(),
            tightening: Arc::default(),
            signals: SpendSignals::default(),
        }
    }

    /// Tells `signals` which level's budget refused each call refused by a budget.
    pub fn with_spend_signals(mut self, signals: SpendSignals) -> Self {
        self.signals = signals;
        self
    }

    /// Admits calls far from their key's limits from leases of `calls` calls' worth
    /// ([`crate::governance::key_leases`]; 0 or 1: no leases). For counters in the database or Redis:
    /// the node's memory counters need none.
    pub fn with_leases(mut self, calls: u32) -> Self {
        self.leases = (calls > 1).then(|| Leases::new(calls));
        self
    }

    /// Counts in Redis (`gateway.key_counters = "redis"`); `budgets` and `rates` (database
    /// counters) then serve while Redis is unavailable.
    pub fn with_redis(mut self, redis: RedisCounters) -> Self {
        self.redis = Some(redis);
        self
    }

    /// Gives back what a call held (`held`: its levels' budget and token reservations), so
    /// that a fallback is admitted afresh in its place.
    pub(crate) async fn release(&self, held: Vec<Held>) {
        for (reservation, tokens) in held {
            if let Some(reservation) = reservation {
                reservation.release().await;
            }
            if let Some(tokens) = tokens {
                tokens.settle(0);
            }
        }
    }

    /// The context window of `model` in tokens, when its provider sets one.
    pub fn context_window(&self, model: &str) -> Option<u64> {
        self.budgets.prices().context_window(model)
    }

    /// Admits `principal`'s call at every level it counts against (its key, and for a
    /// team-scoped key the member and the team: [`LimitLevel::of_key`]), in that order; a
    /// level that refuses gives back what the levels before it reserved, so a call holds
    /// either every level's reservation or none, and no level's counter ever passes its
    /// limit. Each level is admitted as [`Self::admit_level`] says.
    ///
    /// # Errors
    /// As [`Self::admit_level`], naming the level that refused (`scope`).
    ///
    /// A level whose budget is in `clamp` mode and cannot take the call's worst case has the
    /// call admitted once more with its `max_tokens` lowered to what that budget has left
    /// ([`crate::governance::clamp`]); the lowered body is then [`Admitted::clamped`].
    pub async fn admit(
        &self,
        principal: &Principal,
        summary: &RequestSummary,
        body: &Bytes,
    ) -> Result<Admitted, ServiceError> {
        let outcome = self.admit_or_clamp(principal, summary, body).await;
        if let Err(ServiceError::BudgetExceeded { scope, spent_micros, .. }) = &outcome {
            self.signal_refusal(
                principal,
                Refusal { scope: *scope, committed_micros: *spent_micros },
            );
        }
        outcome
    }

    /// [`Self::admit`] but for the refusal's signal.
    async fn admit_or_clamp(
        &self,
        principal: &Principal,
        summary: &RequestSummary,
        body: &Bytes,
    ) -> Result<Admitted, ServiceError> {
        let counted = AtomicBool::new(false);
        let asked = Asked::new(summary, body, &counted);
        let refused = match self.admit_levels(principal, &asked).await {
            Err(refused @ ServiceError::BudgetExceeded { .. }) => refused,
            outcome => return outcome,
        };
        let ServiceError::BudgetExceeded { scope, limit_micros, spent_micros, .. } = &refused
        else {
            return Err(refused);
        };

        let clamps = principal.limit_levels().any(|level| {
            level.scope == *scope && level.policy.budget_mode == Some(BudgetMode::Clamp)
        });
        let left = limit_micros.saturating_sub(*spent_micros);
        let clamped = clamps
            .then(|| crate::governance::clamp::clamped_body(&self.budgets, summary, body, left))
            .flatten();
        let Some(clamped) = clamped else {
            return Err(refused);
        };
        let mut lowered = crate::dialect::validate(summary.endpoint, &clamped)?;
        // A bound raised to the model's context window (input the gateway cannot see) holds
        // for the lowered body too.
        lowered.prompt_bound = lowered.prompt_bound.max(summary.prompt_bound);
        lowered.prompt_floor = summary.prompt_floor;
        let summary = lowered;
        let mut admitted =
            self.admit_levels(principal, &Asked::new(&summary, &clamped, &counted)).await?;
        admitted.clamped = Some((clamped, summary));
        Ok(admitted)
    }

    /// Tells the spend signals that a budget refused a call of `principal`'s key.
    fn signal_refusal(&self, principal: &Principal, refused: Refusal) {
        if !self.signals.listened() {
            return;
        }
        let Principal::ApiKey { key_id, user_id, team, .. } = principal else {
            return;
        };
        self.signals.send(vec![SpendSignal {
            key_id: key_id.clone(),
            user_id: user_id.clone(),
            team_id: team.as_ref().map(|t| t.team_id.clone()),
            member: team.as_ref().is_some_and(|t| t.member.is_some()),
            refused: Some(refused),
        }]);
    }

    /// Every level's admission of the call, none or all (see [`Self::admit`]).
    async fn admit_levels(
        &self,
        principal: &Principal,
        asked: &Asked<'_>,
    ) -> Result<Admitted, ServiceError> {
        let mut admitted = Admitted::default();
        for level in principal.limit_levels() {
            if !level.is_limited() {
                continue;
            }
            match self.admit_level(&level, asked).await {
                Ok(admission) => {
                    if admitted.status.is_none() {
                        admitted.status = admission.status;
                    }
                    admitted.levels.push(admission);
                }
                Err(refused) => {
                    for admission in admitted.levels {
                        admission.release().await;
                    }
                    return Err(refused);
                }
            }
        }
        Ok(admitted)
    }

    /// Admits a call at `level`: `model` with request `body`, whose worst case is at most
    /// `bound` ([`crate::dialect::chat::RequestSummary`]'s `prompt_bound` and
    /// `completion_cap`) plus `images` images at the model's `image_tokens`.
    ///
    /// The call is first admitted at `bound` (no tokenizer) as long as the key stays
    /// [`BOUND_HEADROOM`] such calls away from its budget and `tpm_limit`; closer to them the
    /// prompt is counted as the model's [`crate::dialect::tokens::PromptCounting`] says (its
    /// tokenizer where that is known to be the upstream's, else the body's bytes) and the call
    /// admitted at that count.
    ///
    /// # Errors
    /// [`ServiceError::RateLimited`] when the key's `rpm_limit` or `tpm_limit` cannot take
    /// the call, [`ServiceError::BudgetExceeded`] when its budget cannot;
    /// [`ServiceError::Unavailable`] when the counters' database is down.
    ///
    /// A call refused by the budget first lowers this node's running calls of the key that
    /// were admitted at an upper bound to their exact worst case (`SpendGovernance::tighten`),
    /// and is admitted once more if that gave anything back: a burst of calls near the
    /// budget admits what fits, not what fits after the bounds' over-reservation.
    async fn admit_level(
        &self,
        level: &LimitLevel<'_>,
        asked: &Asked<'_>,
    ) -> Result<Admission, ServiceError> {
        match self.admit_once(level, asked).await {
            Err(ServiceError::BudgetExceeded { .. }) if self.tighten(level.counter).await => {
                self.admit_once(level, asked).await
            }
            outcome => outcome,
        }
    }

    /// Lowers this node's running calls of counter `key_id` (a key's, a member's or a team's)
    /// admitted at an upper bound to their exact worst case (the model's prompt count), giving
    /// the difference back to the counter at once; calls refused by it meanwhile wait for it.
    /// Whether anything was given back, or another call's tightening ended meanwhile (room
    /// may have been made).
    async fn tighten(&self, key_id: &str) -> bool {
        let lock = self.tightening.entry(key_id.to_owned()).or_default().clone();
        let waited = lock.try_lock().is_err();
        let _turn = lock.lock().await;
        let calls = self.bounded.remove(key_id).map(|(_, calls)| calls).unwrap_or_default();
        let mut given_back = 0_i64;
        for call in calls {
            let model = model_of(&call.body);
            let exact = self.budgets.worst_case(
                &model,
                call.shape,
                &call.body,
                call.prompt_bound,
                call.image_prompt,
                call.completion_cap,
            );
            let cost = self.budgets.cost_micros(&model, &exact);
            given_back = given_back.saturating_add(call.tightener.tighten_to(cost).await);
        }
        given_back > 0 || waited
    }

    /// Notes a call of counter `key_id` admitted at an upper bound, for `Self::tighten`.
    fn note_bounded(
        &self,
        key_id: &str,
        admission: &Admission,
        (shape, body, prompt_bound, image_prompt, completion_cap): (
            PromptShape,
            &Bytes,
            u64,
            u64,
            u64,
        ),
    ) {
        let Some(reservation) = admission.reservation.as_ref() else {
            return;
        };
        let Some(tightener) = reservation.tightener() else {
            return;
        };
        let call = BoundCall {
            tightener,
            shape,
            body: body.clone(),
            prompt_bound,
            image_prompt,
            completion_cap,
        };
        // The key's list usually exists: no copy of its id per call.
        let mut calls = match self.bounded.get_mut(key_id) {
            Some(calls) => calls,
            None => self.bounded.entry(key_id.to_owned()).or_default(),
        };
        if calls.len() >= BOUND_CALLS_KEPT {
            calls.retain(|call| call.tightener.is_running());
        }
        calls.push(call);
    }

    /// One admission (see [`Self::admit`]): from the node's lease when it has one that fits,
    /// else in Redis, else in the database (at the bound first while far from the limits,
    /// then at the exact count).
    async fn admit_once(
        &self,
        level: &LimitLevel<'_>,
        asked: &Asked<'_>,
    ) -> Result<Admission, ServiceError> {
        let Asked { model, shape, body, bound, images, fallback_counted } = *asked;
        let policy = level.policy;
        let priced = policy.max_budget_micros.is_some() || policy.tpm_limit.is_some();
        if !priced && policy.rpm_limit.is_none() {
            return Ok(Admission::default());
        }
        let image_prompt = if priced { self.budgets.image_prompt(model, images) } else { 0 };
        let with_images = if priced {
            TokenUsage::new(
                bound.prompt_tokens.saturating_add(image_prompt),
                bound.completion_tokens,
            )
        } else {
            TokenUsage::default()
        };
        let call = LevelCall {
            level,
            model,
            shape,
            body,
            priced,
            prompt_bound: bound.prompt_tokens,
            image_prompt,
            bound: with_images,
            fallback_counted,
        };
        if let Some(admission) = self.admit_leased(&call).await {
            return Ok(admission);
        }
        let mut fallback = false;
        if let Some(redis) = &self.redis {
            match self.admit_in_redis(redis, &call).await? {
                InRedis::Admitted(admission) => return Ok(*admission),
                InRedis::Unavailable => fallback = true,
                InRedis::Undecided => {}
            }
        }
        if priced && self.redis.is_none() {
            if let Some(admission) = self.admit_bounded(level, model, &call.bound).await? {
                if worth_noting(self.budgets.plan(level, model, &call.bound).as_ref()) {
                    self.note_bounded(level.counter, &admission, call.noted());
                }
                return Ok(admission);
            }
        }
        self.admit_exact(&call, fallback).await
    }

    /// The call admitted from this node's lease of the level's counters, when it holds one
    /// that fits (`None`: no leases, or none fits).
    async fn admit_leased(&self, call: &LevelCall<'_>) -> Option<Admission> {
        let leases = self.leases.as_ref()?;
        let budget = self.budgets.plan(call.level, call.model, &call.bound);
        let rates = RatePlan::new(call.level, &call.bound, self.budgets.now());
        // A lease may be asked for in the background: the future owns its limits.
        let grant = |budget, rates, headroom| {
            let limits = self.clone();
            async move { limits.grant_lease(budget, rates, headroom).await }
        };
        let admission = leases.admit(budget.as_ref(), rates.as_ref(), grant).await?;
        if worth_noting(budget.as_ref()) {
            self.note_bounded(call.level.counter, &admission, call.noted());
        }
        Some(admission)
    }

    /// The call admitted in Redis: at the bound while it leaves [`BOUND_HEADROOM`], else at
    /// the exact count.
    ///
    /// # Errors
    /// The refusal of a limit; [`ServiceError::Unavailable`] when Redis answers out of turn.
    async fn admit_in_redis(
        &self,
        redis: &RedisCounters,
        call: &LevelCall<'_>,
    ) -> Result<InRedis, ServiceError> {
        let mut attempts = Vec::with_capacity(2);
        if call.priced {
            attempts.push((call.bound, BOUND_HEADROOM));
        }
        attempts.push((TokenUsage::default(), 0));
        for (worst, headroom) in attempts {
            let worst = if headroom > 0 { worst } else { call.exact(&self.budgets) };
            let budget = self.budgets.plan(call.level, call.model, &worst);
            let rates = RatePlan::new(call.level, &worst, self.budgets.now());
            match redis.admit(&self.budgets, budget.as_ref(), rates.as_ref(), headroom).await {
                Some(Ok(RedisAdmission::Admitted(status, reservation))) => {
                    let admission =
                        Admission { status, reservation: Some(reservation), tokens: None };
                    if headroom > 0 && worth_noting(budget.as_ref()) {
                        self.note_bounded(call.level.counter, &admission, call.noted());
                    }
                    return Ok(InRedis::Admitted(Box::new(admission)));
                }
                Some(Ok(RedisAdmission::CountExactly)) if headroom > 0 => continue,
                Some(Ok(RedisAdmission::CountExactly)) => {
                    return Err(ServiceError::Unavailable(
                        "the key's counters answered out of turn; retry".to_owned(),
                    ))
                }
                Some(Err(e)) => return Err(e),
                None => {
                    if !call.fallback_counted.swap(true, Ordering::Relaxed) {
                        redis.count_fallback();
                    }
                    return Ok(InRedis::Unavailable);
                }
            }
        }
        Ok(InRedis::Undecided)
    }

    /// The call admitted at the exact count of its prompt, in the database (or the node's
    /// memory); its budget in the fallback row of its counter when Redis is unavailable
    /// (`fallback`).
    ///
    /// # Errors
    /// The refusal of a limit; [`ServiceError::Unavailable`] when the database is down.
    async fn admit_exact(
        &self,
        call: &LevelCall<'_>,
        fallback: bool,
    ) -> Result<Admission, ServiceError> {
        let worst = call.exact(&self.budgets);
        let budget = self.budgets.plan(call.level, call.model, &worst);
        let rates = RatePlan::new(call.level, &worst, self.budgets.now());
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
                if let Some(redis) = &self.redis {
                    redis.wait_for_ledger().await;
                }
                let name = format!("{FALLBACK_PREFIX}{}", plan.qualified());
                Some(self.budgets.reserve_in_database(plan, name).await?)
            }
            Some(plan) => Some(self.budgets.reserve_planned(plan).await?),
            None => None,
        };
        Ok(Admission { status, reservation, tokens })
    }

    /// A lease planned by `budget` and `rates` (a lease's calls' worth and room), from Redis
    /// (admitted with `headroom`) or the database; `None` when it does not fit or the counters
    /// failed (nothing counted).
    async fn grant_lease(
        &self,
        budget: Option<crate::governance::budget::BudgetPlan>,
        rates: Option<RatePlan>,
        headroom: i64,
    ) -> Option<Granted> {
        if let Some(redis) = &self.redis {
            return match redis.admit(&self.budgets, budget.as_ref(), rates.as_ref(), headroom).await
            {
                Some(Ok(RedisAdmission::Admitted(status, reservation))) => Some(Granted {
                    admission: Admission { status, reservation: Some(reservation), tokens: None },
                    give_back: None,
                }),
                _ => None,
            };
        }
        let reservation = match budget {
            Some(plan) => Some(self.budgets.reserve_bounded(plan).await.ok().flatten()?),
            None => None,
        };
        let (status, tokens) = match rates {
            Some(plan) => match self.rates.admit_bounded(plan).await {
                Ok(Some((status, tokens))) => (Some(status), tokens),
                _ => {
                    if let Some(reservation) = reservation {
                        reservation.release().await;
                    }
                    return None;
                }
            },
            None => (None, None),
        };
        Some(Granted {
            admission: Admission { status, reservation, tokens },
            give_back: Some(self.rates.clone()),
        })
    }

    /// The database or memory counters' admission at the upper bound `bound`, kept
    /// [`BOUND_HEADROOM`] such calls away from the budget and the `tpm_limit`: `None`, with
    /// nothing left counted, when it comes closer (count exactly). The budget is reserved
    /// first, so that its "too close" needs no undo; a refusal by the rate limit gives the
    /// budget's reservation back.
    async fn admit_bounded(
        &self,
        level: &LimitLevel<'_>,
        model: &str,
        bound: &TokenUsage,
    ) -> Result<Option<Admission>, ServiceError> {
        let reservation = match self.budgets.plan(level, model, bound) {
            Some(mut plan) => {
                plan.room = plan.cost.saturating_mul(BOUND_HEADROOM);
                match self.budgets.reserve_bounded(plan).await? {
                    Some(reservation) => Some(reservation),
                    None => return Ok(None),
                }
            }
            None => None,
        };
        let (status, tokens) = match RatePlan::new(level, bound, self.budgets.now()) {
            Some(mut plan) => {
                plan.room = plan.tokens.saturating_mul(BOUND_HEADROOM);
                match self.rates.admit_bounded(plan).await {
                    Ok(Some((status, tokens))) => (Some(status), tokens),
                    other => {
                        if let Some(reservation) = reservation {
                            reservation.release().await;
                        }
                        return other.map(|_| None);
                    }
                }
            }
            None => (None, None),
        };
        Ok(Some(Admission { status, reservation, tokens }))
    }
}
