//! A call's reservation in its key's counters ([`Reservation`]), wherever they are: a row of
//! the database, the node's memory ([`crate::governance::key_counters`]), Redis
//! ([`crate::governance::redis_held`]) or a node's lease ([`LeaseGrant`], implemented by
//! [`crate::governance::key_leases`]); its settlement, its release, and its [`Tightener`].
//!
//! This file sits below the budgets, the rate windows, the Redis counters and the leases,
//! which all make or hold reservations: a lease holds a reservation of its own and a
//! reservation may be a call of a lease, so the lease is seen here through a trait.

use crate::db::Db;
use crate::governance::key_counters::NodeCounters;
use crate::governance::redis_held::{RedisAdjuster, RedisHeld};
use aigw_persistence::budgets;
use aigw_persistence::PersistenceError;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};

/// The lease a call was taken from, as the call's reservation sees it (implemented by
/// [`crate::governance::key_leases`]' lease).
pub(crate) trait LeaseGrant: std::fmt::Debug + Send + Sync {
    /// Gives a call's bound (`bound_micros`, what its reservation held at the end, and
    /// `call_tokens`) minus its real `cost_micros` and `total_tokens` back to the lease, for
    /// the lease's next calls or, once it ends, the shared counters.
    fn settle_call(&self, call_tokens: i64, bound_micros: i64, cost_micros: u64, total_tokens: u64);

    /// Lowers the micro-USD granted by `by`: a running call of the lease was tightened to its
    /// exact worst case, and the lease's reservation is lowered by as much.
    fn lower_grant(&self, by: i64);

    /// A tightener of the lease's own reservation in the shared counters.
    fn tightener(&self) -> Option<Tightener>;
}

/// A call taken from a lease: its bound's tokens (its micro-USD are its reservation's),
/// settled back into the lease.
#[derive(Debug)]
pub(crate) struct LeaseCall {
    lease: Arc<dyn LeaseGrant>,
    tokens: i64,
}

impl LeaseCall {
    /// A call of bound `tokens` taken from `lease`.
    pub(crate) fn new(lease: Arc<dyn LeaseGrant>, tokens: i64) -> Self {
        Self { lease, tokens }
    }

    /// The lease the call was taken from.
    fn lease(&self) -> Weak<dyn LeaseGrant> {
        Arc::downgrade(&self.lease)
    }

    /// See [`LeaseGrant::settle_call`].
    fn settle(self, bound_micros: i64, cost_micros: u64, total_tokens: u64) {
        self.lease.settle_call(self.tokens, bound_micros, cost_micros, total_tokens);
    }
}

/// Where a reservation was counted.
#[derive(Debug)]
pub(super) enum Counter {
    /// A database counter row, by its period name.
    Database(Db, String),
    /// The node's memory: the period's name.
    Node(NodeCounters, String),
    /// Redis: the budget counter and the rate window, settled by one script.
    Redis(RedisHeld),
    /// A node's lease ([`crate::governance::key_leases`]): the call's bound was taken from it and its
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
/// outside the call (the node's list of calls admitted at a bound, [`crate::governance::key_limits`]).
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
    Lease(Weak<dyn LeaseGrant>),
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
    pub(super) fn new(counter: Counter, key_id: String, reserved_micros: i64) -> Self {
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
    /// [`crate::governance::key_rates::KeyRates::give_back_requests`]). In the background.
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
