//! Leases of keys' limits (docs/budgets.md "Leases"): far from a key's limits, a node
//! takes `gateway.key_lease_calls` calls' worth of the key's budget, tokens and requests from the
//! shared counters (the database's or Redis') in ONE admission, and admits the calls that follow
//! from that lease in its own memory: no round trip to the counters per call.
//!
//! - **Exact across nodes**: a lease is a reservation like any call's, counted in the shared
//!   counters before any call uses it, so the counters never hold less than what the nodes'
//!   calls may spend. A lease is taken only while the key keeps room for
//!   [`BOUND_HEADROOM`] more calls beyond it (budget, tpm and rpm); closer to a limit every
//!   call is admitted by the counters themselves, one by one, as without leases.
//! - **Settlement**: a call taken from a lease settles into it (its bound minus its real cost
//!   and tokens go back into the lease). When the lease ends - [`LEASE_TTL`] after it was
//!   taken, at the end of its rate window, when the key's limits change, or when a call does
//!   not fit in what is left - and its last call is settled, what it did not use goes back
//!   to the shared counters: budget, tokens and requests.
//! - **Headers**: `x-ratelimit-remaining-*` count what the lease has handed out, as of the
//!   node's last exchange with the counters (at most [`LEASE_TTL`] old).
//! - **Near a limit**: a refused lease is not asked for again for [`LEASE_TTL`]; each call goes
//!   to the counters meanwhile.
//! - **The next lease ahead of time**: once half of a lease is used, the call that crossed the
//!   half asks, in the background, for the next one, which the calls take from as soon as the
//!   current one cannot serve them: a busy key's calls do not wait for the counters. It is
//!   granted only with room for [`BOUND_HEADROOM`] calls plus one more current lease beyond
//!   it, so a node never holds more unused calls near a limit than without it; a refused
//!   one leaves the node to ask again, in the call's path, when the current lease ends.

use crate::governance::admission::{Admission, BOUND_HEADROOM};
use crate::governance::budget::BudgetPlan;
use crate::governance::key_rates::{KeyRates, RatePlan, RateStatus, TokenReservation, WINDOW_SECS};
use crate::governance::reservation::{LeaseCall, LeaseGrant, Reservation, Tightener};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// A busy key's leases grow up to this many times `gateway.key_lease_calls`: a lease used up
/// within a quarter of [`LEASE_TTL`] is followed by one twice as large, one that ends with
/// more than half of it unused by one half as large.
pub const MAX_LEASE_GROWTH: i64 = 64;

/// How long a node uses a lease before what is left of it goes back.
pub const LEASE_TTL: Duration = Duration::from_secs(1);

/// How often the node looks for leases to end.
const SWEEP_EVERY: Duration = Duration::from_millis(250);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain numbers behind: still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a lease was taken for: a call is taken from it only when these are the call's own (a
/// PATCH of the key's limits, a new period or a new minute ends the lease).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Terms {
    /// The budget's period kind, its period (`YYYY-MM-DD` or `total`) and its limit: what
    /// [`BudgetPlan::qualified`] names, compared without writing the name per call.
    budget: Option<(aigw_domain::BudgetPeriod, String, i64)>,
    /// The rate window's start, Unix seconds.
    window_start: Option<i64>,
    rpm: Option<i64>,
    tpm: Option<i64>,
}

impl Terms {
    fn of(budget: Option<&BudgetPlan>, rates: Option<&RatePlan>) -> Self {
        Self {
            budget: budget.map(BudgetPlan::terms),
            window_start: rates.map(|r| r.window_start),
            rpm: rates.and_then(|r| r.rpm),
            tpm: rates.and_then(|r| r.tpm),
        }
    }
}

/// What is left of a lease: requests, micro-USD and tokens.
#[derive(Debug, Clone, Copy)]
struct Left {
    requests: i64,
    cost: i64,
    tokens: i64,
}

/// One lease of a key's limits, shared by the node's slot and the calls taken from it; when the
/// last of them lets go, what it did not use goes back to the shared counters ([`Drop`]).
#[derive(Debug)]
pub(crate) struct Lease {
    key_id: String,
    terms: Terms,
    taken_at: Instant,
    /// Calls' worth granted.
    calls: i64,
    /// Granted: micro-USD (lowered when a running call of it is tightened to its exact worst
    /// case, [`crate::governance::reservation::Tightener`]) and tokens (requests are in `left` only: each call
    /// uses exactly one).
    cost: AtomicI64,
    tokens: i64,
    /// The key's window right after the grant (with rate limits).
    status: Option<RateStatus>,
    left: Mutex<Left>,
    /// The lease's reservations in the shared counters.
    reservation: Option<Reservation>,
    token_reservation: Option<TokenReservation>,
    /// Gives a database window's unused requests back (`None` in Redis: the reservation does).
    rates: Option<KeyRates>,
}

impl Lease {
    /// A lease of `calls` calls of bound `cost` micro-USD and `tokens` tokens, under `terms`,
    /// as `granted` by the shared counters.
    fn new(
        key_id: &str,
        terms: Terms,
        (calls, cost, tokens): (i64, i64, i64),
        granted: Granted,
    ) -> Self {
        let Granted { admission, give_back } = granted;
        let (cost, tokens) = (cost.saturating_mul(calls), tokens.saturating_mul(calls));
        Self {
            key_id: key_id.to_owned(),
            terms,
            taken_at: Instant::now(),
            calls,
            cost: AtomicI64::new(cost),
            tokens,
            status: admission.status,
            left: Mutex::new(Left { requests: calls, cost, tokens }),
            reservation: admission.reservation,
            token_reservation: admission.tokens,
            rates: give_back,
        }
    }

    fn usable(&self, terms: &Terms) -> bool {
        self.terms == *terms && self.taken_at.elapsed() < LEASE_TTL
    }

    /// Where the key stands once `left` is what remains of the lease, at `now` (Unix seconds
    /// of the limits' clock), for the headers.
    fn status(&self, left: &Left, now: i64) -> Option<RateStatus> {
        let status = self.status?;
        let window_start = self.terms.window_start?;
        Some(RateStatus {
            requests: status.requests.map(|(limit, rest)| (limit, rest + left.requests)),
            tokens: status.tokens.map(|(limit, rest)| (limit, rest + left.tokens)),
            reset_secs: window_start + WINDOW_SECS - now,
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let left = *self.left.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        let used_cost = self.cost.load(Ordering::Acquire) - left.cost;
        let used_tokens = u64::try_from(self.tokens - left.tokens).unwrap_or(0);
        let unused_requests = left.requests.max(0);
        if let Some(reservation) = self.reservation.take() {
            reservation.settle_lease(used_cost, used_tokens, unused_requests);
        }
        if let Some(tokens) = self.token_reservation.take() {
            tokens.settle(used_tokens);
        }
        if let (Some(rates), Some(window_start)) = (&self.rates, self.terms.window_start) {
            rates.give_back_requests(&self.key_id, window_start, unused_requests);
        }
    }
}

impl LeaseGrant for Lease {
    fn settle_call(
        &self,
        call_tokens: i64,
        bound_micros: i64,
        cost_micros: u64,
        total_tokens: u64,
    ) {
        // A lease counts only what its key limits: no cost without a budget, no tokens
        // without a `tpm_limit`.
        let cost = match self.terms.budget {
            Some(_) => i64::try_from(cost_micros).unwrap_or(i64::MAX),
            None => 0,
        };
        let tokens = match self.terms.tpm {
            Some(_) => i64::try_from(total_tokens).unwrap_or(i64::MAX),
            None => 0,
        };
        let mut left = lock(&self.left);
        left.cost = left.cost.saturating_add(bound_micros.saturating_sub(cost));
        left.tokens = left.tokens.saturating_add(call_tokens.saturating_sub(tokens));
    }

    fn lower_grant(&self, by: i64) {
        self.cost.fetch_sub(by, Ordering::AcqRel);
    }

    fn tightener(&self) -> Option<Tightener> {
        self.reservation.as_ref().and_then(Reservation::tightener)
    }
}

/// What the shared counters granted a lease: the admission of its calls' worth and, for the
/// database's windows, the limiter that gives unused requests back (Redis' reservation does).
#[derive(Debug)]
pub(crate) struct Granted {
    pub(crate) admission: Admission,
    pub(crate) give_back: Option<KeyRates>,
}

/// One key's lease on this node.
#[derive(Debug, Default)]
struct Slot {
    /// Held while a lease is taken (in a call's path, or ahead of time): the calls that find
    /// none meanwhile wait for it instead of each taking one.
    taking: Arc<tokio::sync::Mutex<()>>,
    state: Mutex<SlotState>,
}

#[derive(Debug, Default)]
struct SlotState {
    lease: Option<Arc<Lease>>,
    /// The lease taken ahead of time, used once `lease` cannot serve a call.
    next: Option<Arc<Lease>>,
    /// The next lease is being asked for, or was refused while `lease` is current.
    next_asked: bool,
    /// No lease is asked for until then (the last one was refused: the key is near a limit).
    refused_until: Option<Instant>,
    /// Calls' worth of the next lease (0: the node's base size).
    calls: i64,
}

impl SlotState {
    /// Ends the lease; its size tells the next one's: twice as large when it was used up
    /// within a quarter of [`LEASE_TTL`], half as large when more than half of it went unused.
    fn end(&mut self, used_up: bool) -> Option<Arc<Lease>> {
        let lease = self.lease.take()?;
        let left = lock(&lease.left).requests;
        if used_up && lease.taken_at.elapsed() < LEASE_TTL / 4 {
            self.calls = lease.calls.saturating_mul(2);
        } else if left > lease.calls / 2 {
            self.calls = lease.calls / 2;
        }
        Some(lease)
    }
}

/// A call taken from a lease, and whether it is the one that asks for the next lease (its
/// calls' worth, and the extra room it must leave: the current lease's calls).
struct Taken {
    admission: Admission,
    ask_next: Option<(i64, i64)>,
}

impl Slot {
    /// Takes a call of bound `(cost, tokens)` under `terms` from the lease, if it has room; a
    /// lease that cannot serve it (ended, other terms, too little left) ends here, and the next
    /// lease, when one was taken ahead of time, serves instead.
    fn take(&self, terms: &Terms, cost: i64, tokens: i64, now: i64) -> Option<Taken> {
        let mut state = lock(&self.state);
        let mut ended = Vec::new();
        let taken = loop {
            let Some(lease) = state.lease.clone() else {
                match state.next.take() {
                    Some(next) => {
                        state.lease = Some(next);
                        state.next_asked = false;
                        continue;
                    }
                    None => break None,
                }
            };
            let usable = lease.usable(terms);
            if usable {
                let mut left = lock(&lease.left);
                if left.requests >= 1 && left.cost >= cost && left.tokens >= tokens {
                    left.requests -= 1;
                    left.cost -= cost;
                    left.tokens -= tokens;
                    let status = lease.status(&left, now);
                    let half_used = left.requests.saturating_mul(2) < lease.calls;
                    drop(left);
                    let ask_next =
                        (half_used && !state.next_asked && state.next.is_none()).then(|| {
                            state.next_asked = true;
                            // Used up within a quarter of its time (half of it within an
                            // eighth): the next one is twice as large.
                            let fast = lease.taken_at.elapsed() < LEASE_TTL / 8;
                            (
                                if fast { lease.calls.saturating_mul(2) } else { lease.calls },
                                lease.calls,
                            )
                        });
                    let key_id = lease.key_id.clone();
                    let call = LeaseCall::new(lease, tokens);
                    let reservation = Reservation::from_lease(key_id, cost, call);
                    let admission =
                        Admission { status, reservation: Some(reservation), tokens: None };
                    break Some(Taken { admission, ask_next });
                }
            }
            ended.extend(state.end(usable));
        };
        drop(state);
        drop(ended);
        taken
    }

    fn refused(&self) -> bool {
        lock(&self.state).refused_until.is_some_and(|until| Instant::now() < until)
    }
}

/// The leases of a node (cheap to clone; clones share them).
#[derive(Debug, Clone)]
pub(crate) struct Leases {
    calls: i64,
    slots: Arc<Mutex<HashMap<String, Arc<Slot>>>>,
    sweeper: Arc<OnceLock<()>>,
}

impl Leases {
    /// Leases of `calls` calls' worth each.
    pub(crate) fn new(calls: u32) -> Self {
        Self { calls: i64::from(calls.max(2)), slots: Arc::default(), sweeper: Arc::default() }
    }

    /// Admits a call whose bound is planned by `budget` and `rates` from the key's lease on
    /// this node, taking a new lease with `grant` (the lease's plans, and the headroom of its
    /// admission in Redis) when there is none with room for it, and asking `grant` for the next
    /// one in the background once half of a lease is used. `None` when no lease can serve it
    /// (the key is near a limit, or the counters failed): the caller then admits the call by
    /// itself.
    pub(crate) async fn admit<F, Fut>(
        &self,
        budget: Option<&BudgetPlan>,
        rates: Option<&RatePlan>,
        grant: F,
    ) -> Option<Admission>
    where
        F: Fn(Option<BudgetPlan>, Option<RatePlan>, i64) -> Fut,
        Fut: Future<Output = Option<Granted>> + Send + 'static,
    {
        let key_id = budget.map(|b| b.key_id.as_str()).or(rates.map(|r| r.key_id.as_str()))?;
        let terms = Terms::of(budget, rates);
        let cost = budget.map_or(0, |b| b.cost);
        let tokens = rates.map_or(0, |r| r.tokens);
        // The status's reset is counted from the plan's time (without rates there is none).
        let now = rates.map_or(0, |r| r.now);
        let slot = self.slot(key_id);
        let leased = |taken: Taken| {
            if let Some((calls, extra_room)) = taken.ask_next {
                let plans = plans(budget, rates, calls, extra_room);
                ask_next(&slot, key_id, &terms, (calls, cost, tokens), plans, &grant);
            }
            taken.admission
        };
        if let Some(taken) = slot.take(&terms, cost, tokens, now) {
            return Some(leased(taken));
        }
        if slot.refused() {
            return None;
        }
        let _taking = slot.taking.lock().await;
        // Another call may have taken a lease (or been refused one) meanwhile.
        if let Some(taken) = slot.take(&terms, cost, tokens, now) {
            return Some(leased(taken));
        }
        if slot.refused() {
            return None;
        }
        let calls = {
            let state = lock(&slot.state);
            state.calls.clamp(self.calls, self.calls.saturating_mul(MAX_LEASE_GROWTH))
        };
        let (budget_plan, rate_plan, headroom) = plans(budget, rates, calls, 0);
        let Some(granted) = grant(budget_plan, rate_plan, headroom).await else {
            let mut state = lock(&slot.state);
            state.refused_until = Some(Instant::now() + LEASE_TTL);
            state.calls = self.calls;
            return None;
        };
        let lease = Arc::new(Lease::new(key_id, terms.clone(), (calls, cost, tokens), granted));
        let ended = {
            let mut state = lock(&slot.state);
            state.next_asked = false;
            state.lease.replace(lease)
        };
        drop(ended);
        self.start_sweeper();
        slot.take(&terms, cost, tokens, now).map(leased)
    }

    fn slot(&self, key_id: &str) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        match slots.get(key_id) {
            Some(slot) => slot.clone(),
            None => slots.entry(key_id.to_owned()).or_default().clone(),
        }
    }

    /// Starts, once and within a tokio runtime, the task that ends leases [`LEASE_TTL`] old
    /// (so that an idle key's unused lease goes back) and forgets idle keys; it stops when the
    /// leases are dropped.
    fn start_sweeper(&self) {
        self.sweeper.get_or_init(|| {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(sweep(Arc::downgrade(&self.slots)));
            }
        });
    }
}

/// A lease's plans, from one call's `budget` and `rates`: `calls` calls' worth, leaving room
/// for [`BOUND_HEADROOM`] + `extra_room` more calls; and the headroom argument of its admission
/// in Redis (room for `k` more such leases is room for at least that many calls).
fn plans(
    budget: Option<&BudgetPlan>,
    rates: Option<&RatePlan>,
    calls: i64,
    extra_room: i64,
) -> (Option<BudgetPlan>, Option<RatePlan>, i64) {
    let room = BOUND_HEADROOM.saturating_add(extra_room);
    let budget = budget.cloned().map(|mut plan| {
        plan.room = plan.cost.saturating_mul(room);
        plan.cost = plan.cost.saturating_mul(calls);
        plan
    });
    let rates = rates.cloned().map(|mut plan| {
        plan.room = plan.tokens.saturating_mul(room);
        plan.tokens = plan.tokens.saturating_mul(calls);
        plan.requests = calls;
        plan.request_room = room;
        plan
    });
    (budget, rates, (room + calls - 1) / calls.max(1))
}

/// Asks, in the background, for `slot`'s next lease of `calls` calls of bound `(cost, tokens)`
/// under `terms`, with `grant` and the lease's `plans`; unless a lease is being taken already
/// (or there is no tokio runtime). A refusal leaves the slot to ask again in a call's path
/// once the current lease ends.
fn ask_next<F, Fut>(
    slot: &Arc<Slot>,
    key_id: &str,
    terms: &Terms,
    (calls, cost, tokens): (i64, i64, i64),
    (budget, rates, headroom): (Option<BudgetPlan>, Option<RatePlan>, i64),
    grant: &F,
) where
    F: Fn(Option<BudgetPlan>, Option<RatePlan>, i64) -> Fut,
    Fut: Future<Output = Option<Granted>> + Send + 'static,
{
    let (Ok(runtime), Ok(taking)) =
        (tokio::runtime::Handle::try_current(), slot.taking.clone().try_lock_owned())
    else {
        lock(&slot.state).next_asked = false;
        return;
    };
    let granting = grant(budget, rates, headroom);
    let (slot, key_id, terms) = (slot.clone(), key_id.to_owned(), terms.clone());
    runtime.spawn(async move {
        let granted = granting.await;
        let next = granted.map(|g| Arc::new(Lease::new(&key_id, terms, (calls, cost, tokens), g)));
        let mut state = lock(&slot.state);
        // Refused: `next_asked` stays set until the current lease ends.
        let unused = match next {
            Some(next) if state.lease.is_some() => state.next.replace(next),
            // The current lease ended meanwhile: the next one is current now.
            Some(next) => {
                state.next_asked = false;
                state.lease.replace(next)
            }
            None => None,
        };
        drop(state);
        drop(unused);
        drop(taking);
    });
}

/// The task of [`Leases::start_sweeper`].
async fn sweep(slots: Weak<Mutex<HashMap<String, Arc<Slot>>>>) {
    let mut every = tokio::time::interval(SWEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(slots) = slots.upgrade() else { return };
        let mut ended = Vec::new();
        let now = Instant::now();
        lock(&slots).retain(|_, slot| {
            let mut state = lock(&slot.state);
            if state.lease.as_ref().is_some_and(|lease| lease.taken_at.elapsed() >= LEASE_TTL) {
                ended.extend(state.end(false));
                state.next_asked = false;
            }
            if state.next.as_ref().is_some_and(|next| next.taken_at.elapsed() >= LEASE_TTL) {
                ended.extend(state.next.take());
            }
            let idle = state.lease.is_none()
                && state.next.is_none()
                && state.refused_until.is_none_or(|until| until <= now);
            drop(state);
            // A slot some call holds (taking a lease) stays.
            !(idle && Arc::strong_count(slot) == 1)
        });
        drop(slots);
        // Settled outside the map's lock.
        drop(ended);
    }
}
