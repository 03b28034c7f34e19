//! Keys' budget counters and rpm/tpm windows in Redis (`gateway.key_counters = "redis"`,
//! docs/budgets.md "Where the counters live"), shared by every node using the same Redis.
//!
//! - **Admission**: ONE script per call ([`ADMIT`], EVALSHA) reads the key's rate window and
//!   its budget counter and adds to both only when both fit, so a refusal of one never charges
//!   the other. Redis runs a script alone, so concurrent calls on any number of nodes are
//!   counted one after the other.
//! - **Opening**: a budget counter missing in Redis (first call of a period, a new period after
//!   a PATCH, an idle counter expired, Redis restarted) is opened at the ledger's spend for the
//!   period - the same read as the node counters' - by [`OPEN`], which creates it only when it
//!   is still missing (SET NX semantics); then the admission runs once more.
//! - **Settlement**: sent in the background when the usage recorder records the call, many
//!   calls' settlements in one script while the node is busy ([`crate::governance::redis_held`]).
//! - **Names**: `{prefix}kc:{<key id>}:b:<kind>/<period's first day>` (a hash: `c`
//!   committed micro-USD, `g` the generation the opener chose) and
//!   `{prefix}kc:{<key id>}:w:<minute's Unix start>` (`r` requests, `t` tokens); the key id in
//!   braces keeps a key's counters in one Redis Cluster slot. A PATCH of the period names a
//!   new counter; a PATCH of the limit alone keeps the counter and its running calls. Windows expire 90 s after they open; budget counters 1 h after
//!   their last admission.
//! - **Failure**: when Redis fails or times out ([`RedisLink`]), the admission returns `None`
//!   and the caller counts in the database instead ([`FALLBACK_PREFIX`]) for
//!   `rate_limit.redis_retry_secs`. The first node back on Redis reconciles: it deletes the
//!   Redis budget counters of every key charged in the database meanwhile (so they reopen
//!   from the ledger, which holds the outage's calls) and then those database counters.

use crate::db::Db;
use crate::error::ServiceError;
use crate::governance::budget::{BudgetPlan, Budgets};
use crate::governance::key_rates::{RatePlan, RateStatus};
use crate::governance::redis_fence::Fence;
use crate::governance::redis_held::{flag, placeholder, RedisHeld, Scripts};
use crate::governance::reservation::Reservation;
use crate::redis_link::{RedisConn, RedisLink};
use aigw_persistence::budgets;
use arc_swap::ArcSwapOption;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Period names of the database counters charged while Redis was unavailable: the prefix,
/// then the Redis counter's qualified name ([`BudgetPlan::qualified`]).
pub const FALLBACK_PREFIX: &str = "redis-down/";

/// Seconds a rate window lives (its minute, plus the settlements of its late calls).
const WINDOW_TTL_SECS: i64 = 90;

/// Seconds an idle budget counter lives after its last admission.
const BUDGET_TTL_SECS: i64 = 3600;

/// The admission. KEYS[1]: budget counter, KEYS[2]: rate window. ARGV: [1] `1` with a budget,
/// [2] worst-case cost (micro-USD), [3] budget limit, [4] `1` with rate limits, [5] worst-case
/// tokens, [6] rpm (-1: none), [7] tpm (-1: none), [8] window TTL, [9] budget TTL, [10] the
/// headroom `k` of an upper-bound admission (0: the cost and tokens are exact counts), [11]
/// the requests `n` counted: 1, or a lease's `n` calls (cost and tokens then are the lease's).
/// Returns {outcome, committed, generation, requests, tokens}; outcome 1 admitted, 2 refused by
/// a rate limit, 3 refused by the budget, 4 budget counter not open, 5 count exactly: with
/// `k` > 0, admitting would leave room for fewer than `k` more such calls (or leases) in the
/// budget, the tpm window or, for a lease, the rpm window (nothing charged; the caller counts
/// the prompt and comes back with `k` = 0).
const ADMIT: &str = r"
local r, t = 0, 0
local k, n = tonumber(ARGV[10]), tonumber(ARGV[11])
if ARGV[4] == '1' then
  local w = redis.call('HMGET', KEYS[2], 'r', 't')
  r = tonumber(w[1]) or 0
  t = tonumber(w[2]) or 0
  local rpm, tpm, need = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[5])
  if rpm >= 0 and n > 1 and k > 0 and r > rpm - n * (k + 1) then
    return {5, 0, '', r, t}
  end
  if rpm >= 0 and r > rpm - n then
    return {2, 0, '', r, t}
  end
  if tpm >= 0 and k > 0 and t > tpm - need * (k + 1) then
    return {5, 0, '', r, t}
  end
  if tpm >= 0 and t > tpm - need then
    return {2, 0, '', r, t}
  end
end
local c, g = 0, ''
if ARGV[1] == '1' then
  local b = redis.call('HMGET', KEYS[1], 'c', 'g')
  if not b[1] then
    return {4, 0, '', r, t}
  end
  c = tonumber(b[1])
  g = b[2] or ''
  if k > 0 and c > tonumber(ARGV[3]) - tonumber(ARGV[2]) * (k + 1) then
    return {5, c, g, r, t}
  end
  if c > tonumber(ARGV[3]) - tonumber(ARGV[2]) then
    return {3, c, g, r, t}
  end
  c = redis.call('HINCRBY', KEYS[1], 'c', ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[9])
end
if ARGV[4] == '1' then
  r = redis.call('HINCRBY', KEYS[2], 'r', n)
  t = redis.call('HINCRBY', KEYS[2], 't', ARGV[5])
  if r == n then
    redis.call('EXPIRE', KEYS[2], ARGV[8])
  end
end
return {1, c, g, r, t}
";

/// Opens a budget counter unless it exists or the fence stands. KEYS[1]: the counter, KEYS[2]:
/// the fence ([`Fence`]). ARGV: [1] spent (micro-USD, from the ledger), [2] generation, [3]
/// TTL. Returns 1 when it opened it, 0 when it existed, minus the fence's milliseconds left
/// when the fence stands (the spend was read too early: read it again after them).
const OPEN: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local fence = redis.call('PTTL', KEYS[2])
if fence > 0 then
  return -fence
end
redis.call('HSET', KEYS[1], 'c', ARGV[1], 'g', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
";

/// Times a call opens its budget counter (waiting for the fence each time) before it gives up.
const OPENS: u32 = 3;

/// Keys' counters in Redis (cheap to clone).
#[derive(Clone)]
pub struct RedisCounters {
    scripts: Arc<Scripts>,
    prefix: String,
    db: Db,
    fence: Arc<Fence>,
    /// The master (replication id) this node last marked as seen ([`Fence::mark_epoch`]).
    epoch_marked: Arc<ArcSwapOption<String>>,
    /// The link's `outages_ended` this node last reconciled for (`u64::MAX`: never).
    reconciled: Arc<AtomicU64>,
    /// Held while reconciling: the calls that arrive meanwhile wait for it.
    reconciling: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for RedisCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCounters")
            .field("link", &self.scripts.link)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The answer of [`RedisCounters::admit`]: returned once per call and taken apart at once, so
/// the size of its larger variant costs nothing worth a box.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum RedisAdmission {
    /// Admitted: where the key's window stands (with rate limits) and the reservation.
    Admitted(Option<RateStatus>, Reservation),
    /// An upper-bound admission came close to a limit: count the call exactly and admit again.
    CountExactly,
}

impl RedisCounters {
    /// Counters over `link`, named under `prefix` (`rate_limit.redis_key_prefix`); `db` holds
    /// the ledger they open from and the fallback counters, where every admission is written
    /// within `ledger_lag` ([`Fence`]).
    pub fn new(link: RedisLink, prefix: &str, db: Db, ledger_lag: Duration) -> Self {
        tracing::info!(redis = %link.url_for_logs(), "keys' budgets and rpm/tpm count in Redis");
        Self {
            scripts: Arc::new(Scripts::new(
                link,
                redis::Script::new(ADMIT),
                redis::Script::new(OPEN),
            )),
            prefix: prefix.to_owned(),
            db,
            fence: Arc::new(Fence::new(prefix, ledger_lag)),
            epoch_marked: Arc::new(ArcSwapOption::empty()),
            reconciled: Arc::new(AtomicU64::new(u64::MAX)),
            reconciling: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// Counts a call decided by the database because Redis was unavailable.
    pub(crate) fn count_fallback(&self) {
        self.scripts.link.count_fallback();
    }

    /// Waits, at the start of an outage, until the database's counters can open from a ledger
    /// that holds every call Redis admitted ([`Fence::wait_for_ledger`]).
    pub(crate) async fn wait_for_ledger(&self) {
        self.fence.wait_for_ledger(&self.scripts.link).await;
    }

    /// The budget counter's name; with Sentinels it also names the master's replication id
    /// (`epoch`), so that a promoted replica's copy, which may lack the last admissions, is
    /// never used: the counter reopens under the new master's id.
    fn budget_key(&self, epoch: Option<&str>, key_id: &str, qualified: &str) -> String {
        match epoch {
            Some(epoch) => format!("{}kc:{{{key_id}}}:b:{epoch}:{qualified}", self.prefix),
            None => format!("{}kc:{{{key_id}}}:b:{qualified}", self.prefix),
        }
    }

    fn window_key(&self, key_id: &str, window_start: i64) -> String {
        format!("{}kc:{{{key_id}}}:w:{window_start}", self.prefix)
    }

    /// Admits a call against its key's rate window (`rates`) and budget (`budget`) in one
    /// script. With `headroom` > 0 the plans' cost and tokens are upper bounds, admitted only
    /// while room for `headroom` more such calls remains (else
    /// [`RedisAdmission::CountExactly`], nothing charged); with 0 they are exact counts.
    /// `None` when Redis is unavailable: the caller then counts in the database.
    pub(crate) async fn admit(
        &self,
        budgets: &Budgets,
        budget: Option<&BudgetPlan>,
        rates: Option<&RatePlan>,
        headroom: i64,
    ) -> Option<Result<RedisAdmission, ServiceError>> {
        let key_id = budget.map(|b| b.key_id.as_str()).or(rates.map(|r| r.key_id.as_str()))?;
        let window_key = rates.map(|r| self.window_key(key_id, r.window_start)).unwrap_or_default();
        let (cost, limit) = budget.map_or((0, 0), |b| (b.cost, b.limit));
        let tokens = rates.map_or(0, |r| r.tokens);
        if !self.reconciled() {
            // First call since start or since an outage: the counters charged in the
            // database meanwhile are reconciled before Redis decides again.
            if self.scripts.link.in_backoff() {
                return None;
            }
            let _one_at_a_time = self.reconciling.lock().await;
            if self.scripts.link.in_backoff() {
                return None;
            }
            if !self.reconciled() {
                if let Err(e) = self.reconcile().await {
                    tracing::debug!(error = %e, "key counters not reconciled yet");
                    return None;
                }
            }
        }
        let conn = self.scripts.link.connect().await?;
        if let Some(epoch) = conn.epoch() {
            let marked = self.epoch_marked.load();
            if marked.as_deref().map(String::as_str) != Some(epoch) {
                self.fence.mark_epoch(&conn, epoch).await?;
                self.epoch_marked.store(Some(Arc::new(epoch.to_owned())));
            }
        }
        let budget_key = budget
            .map(|b| self.budget_key(conn.epoch(), key_id, &b.qualified()))
            .unwrap_or_default();
        let mut opens = 0;
        loop {
            let mut invocation = self.scripts.admit.key(placeholder(&budget_key, &window_key));
            invocation
                .key(placeholder(&window_key, &budget_key))
                .arg(flag(budget.is_some()))
                .arg(cost)
                .arg(limit)
                .arg(flag(rates.is_some()))
                .arg(tokens)
                .arg(rates.and_then(|r| r.rpm).unwrap_or(-1))
                .arg(rates.and_then(|r| r.tpm).unwrap_or(-1))
                .arg(WINDOW_TTL_SECS)
                .arg(BUDGET_TTL_SECS)
                .arg(headroom)
                .arg(rates.map_or(1, |r| r.requests));
            let (outcome, committed, generation, requests, counted) =
                conn.invoke::<(i64, i64, String, i64, i64)>(&invocation).await?;
            return Some(match (outcome, budget, rates) {
                (1, ..) => Ok(RedisAdmission::Admitted(
                    rates.map(|r| r.status(requests, counted)),
                    Reservation::in_redis(
                        key_id.to_owned(),
                        cost,
                        RedisHeld {
                            scripts: self.scripts.clone(),
                            budget: budget.map(|_| (budget_key, generation)),
                            window: rates.map(|r| (window_key, r.tpm.map(|_| r.tokens))),
                        },
                    ),
                )),
                (5, ..) if headroom > 0 => Ok(RedisAdmission::CountExactly),
                (2, _, Some(rates)) => Err(rates.refused(requests)),
                (3, Some(budget), _) => Err(budget.refused(committed)),
                (4, Some(budget), _) if opens < OPENS => {
                    opens += 1;
                    match self.open(&conn, budgets, key_id, budget, &budget_key).await? {
                        Ok(()) => continue,
                        Err(e) => Err(e),
                    }
                }
                _ => {
                    Err(ServiceError::Unavailable("the budget counter vanished; retry".to_owned()))
                }
            });
        }
    }

    /// Opens the budget counter `budget_key` at the ledger's spend plus the calls in flight,
    /// read once the fence is down; `Some(Ok)` also when another call opened it first. `None`
    /// when Redis failed.
    async fn open(
        &self,
        conn: &RedisConn,
        budgets: &Budgets,
        key_id: &str,
        budget: &BudgetPlan,
        budget_key: &str,
    ) -> Option<Result<(), ServiceError>> {
        for _ in 0..OPENS {
            self.fence.wait(conn).await?;
            let spent = match budgets.opening_spend(key_id, &budget.from).await {
                Ok(spent) => spent,
                Err(e) => return Some(Err(e)),
            };
            let generation = uuid::Uuid::now_v7().simple().to_string();
            let mut open = self.scripts.open.key(budget_key);
            open.key(self.fence.key()).arg(spent).arg(generation).arg(BUDGET_TTL_SECS);
            if conn.invoke::<i64>(&open).await? >= 0 {
                return Some(Ok(()));
            }
        }
        Some(Err(ServiceError::Unavailable(
            "the key's budget counter is reopening after a Redis outage; retry".to_owned(),
        )))
    }

    /// Whether this node reconciled since its start and since the last outage it saw.
    fn reconciled(&self) -> bool {
        let link = &self.scripts.link;
        link.available() && self.reconciled.load(Ordering::Relaxed) == link.outages_ended()
    }

    /// Deletes the Redis budget counters of the keys charged in the database while Redis was
    /// unavailable (by any node: the rows named [`FALLBACK_PREFIX`]`…`), so that they reopen
    /// from the ledger, then those database counters.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database or Redis fails.
    async fn reconcile(&self) -> Result<(), ServiceError> {
        let link = &self.scripts.link;
        let charged =
            self.db.run(|conn| Ok(budgets::periods_starting_with(conn, FALLBACK_PREFIX)?)).await?;
        if charged.is_empty() {
            if link.available() {
                self.reconciled.store(link.outages_ended(), Ordering::Relaxed);
            }
            return Ok(());
        }
        let Some(conn) = link.connect().await else {
            return Err(ServiceError::Unavailable("Redis failed again".to_owned()));
        };
        let mut pipeline = redis::pipe();
        // First the fence: no counter deleted here reopens before the calls the database
        // admitted are in the ledger.
        self.fence.raise(&mut pipeline);
        for (key_id, period) in &charged {
            let qualified = period.strip_prefix(FALLBACK_PREFIX).unwrap_or(period);
            pipeline.del(self.budget_key(conn.epoch(), key_id, qualified)).ignore();
        }
        if !conn.run(&pipeline).await {
            return Err(ServiceError::Unavailable("Redis failed again".to_owned()));
        }
        let ended = link.outages_ended();
        let count = charged.len();
        self.db
            .run(move |conn| {
                for (key_id, period) in &charged {
                    budgets::forget_period(conn, key_id, period)?;
                }
                Ok(())
            })
            .await?;
        tracing::info!(
            counters = count,
            "after a Redis outage: budget counters charged in the database meanwhile reopen \
             from the ledger"
        );
        self.reconciled.store(ended, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::governance::redis_held::SETTLE_MANY;

    type Admitted = (i64, i64, String, i64, i64);

    /// A `redis-server` of this test's own on a free port (`AIGW_TEST_REDIS_SERVER`, else
    /// `redis-server` from `PATH`, as scripts/test.sh finds it), killed when dropped. `None`
    /// after a loud message when there is none; under `CI=true` that is a failure.
    struct OwnRedis {
        port: u16,
        child: std::process::Child,
    }

    impl OwnRedis {
        fn start() -> Option<Self> {
            let binary =
                std::env::var("AIGW_TEST_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
            let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
            let spawned = std::process::Command::new(&binary)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn();
            let Ok(child) = spawned else {
                assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true: no {binary}");
                eprintln!("!!! {binary} not found: SKIPPING the Redis script test !!!");
                return None;
            };
            let mut server = Self { port, child };
            // Ready once its log says so (no polling); the rest of its log is drained on a
            // thread, so that the server never blocks on a full pipe.
            let stdout = server.child.stdout.take().map(std::io::BufReader::new);
            let mut lines = std::io::BufRead::lines(stdout?);
            let ready = lines
                .by_ref()
                .map_while(Result::ok)
                .any(|line| line.contains("Ready to accept connections"));
            assert!(ready, "{binary} did not start");
            std::thread::spawn(move || lines.for_each(drop));
            Some(server)
        }
    }

    impl OwnRedis {
        /// A connection, a key prefix of the test's own, and its counters under it.
        fn keys(&self) -> (redis::Connection, String, Keys) {
            let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.port)).unwrap();
            let conn = client.get_connection().expect("the test's redis-server");
            let prefix = format!("aigw-unit:{}:", uuid::Uuid::now_v7().simple());
            let keys = Keys {
                budget: format!("{prefix}b"),
                window: format!("{prefix}w"),
                fence: format!("{prefix}fence"),
            };
            (conn, prefix, keys)
        }
    }

    impl Drop for OwnRedis {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// One budget counter and one rate window of a test's own.
    struct Keys {
        budget: String,
        window: String,
        fence: String,
    }

    impl Keys {
        /// [`ADMIT`] of a call costing `cost` (5 tokens) against `limit` and `rpm`.
        fn admit(&self, conn: &mut redis::Connection, cost: i64, limit: i64, rpm: i64) -> Admitted {
            self.admit_with(conn, (cost, 5), (limit, rpm, -1), 0)
        }

        /// [`ADMIT`] of a call of `(cost, tokens)` against `(limit, rpm, tpm)` with headroom `k`.
        fn admit_with(
            &self,
            conn: &mut redis::Connection,
            (cost, tokens): (i64, i64),
            (limit, rpm, tpm): (i64, i64, i64),
            k: i64,
        ) -> Admitted {
            let script = redis::Script::new(ADMIT);
            let mut invocation = script.key(&self.budget);
            invocation.key(&self.window).arg("1").arg(cost).arg(limit).arg("1").arg(tokens);
            invocation.arg(rpm).arg(tpm).arg(WINDOW_TTL_SECS).arg(BUDGET_TTL_SECS).arg(k).arg(1);
            invocation.invoke(conn).unwrap()
        }

        /// [`OPEN`] at `spent` with `generation`.
        fn open(&self, conn: &mut redis::Connection, spent: i64, generation: &str) -> i64 {
            let script = redis::Script::new(OPEN);
            let mut invocation = script.key(&self.budget);
            invocation.key(&self.fence).arg(spent).arg(generation).arg(60);
            invocation.invoke(conn).unwrap()
        }

        /// [`SETTLE_MANY`] of one reservation of `generation`.
        fn settle(
            &self,
            conn: &mut redis::Connection,
            generation: &str,
            (delta, cost): (i64, i64),
            tokens: i64,
        ) {
            let script = redis::Script::new(SETTLE_MANY);
            let mut invocation = script.key(&self.budget);
            invocation.key(&self.window).arg("1").arg(generation).arg(delta).arg(cost);
            let _: i64 = invocation.arg("1").arg(tokens).arg(0).invoke(conn).unwrap();
        }

        fn field(&self, conn: &mut redis::Connection, key: &str, field: &str) -> i64 {
            redis::cmd("HGET").arg(key).arg(field).query(conn).unwrap()
        }
    }

    /// The scripts themselves, against the Redis at 127.0.0.1:6379 (the integration tests'
    /// real Redis), under keys of this test's own.
    #[test]
    fn scripts_charge_both_counters_or_neither_and_settle_across_reopens() {
        let Some(server) = OwnRedis::start() else { return };
        let (mut conn, prefix, k) = server.keys();
        let c = &mut conn;
        assert_eq!(k.admit(c, 10, 100, 3).0, 4, "not open yet");
        assert_eq!(k.open(c, 60, "g1"), 1);
        assert_eq!(k.open(c, 0, "g2"), 0, "SET NX: the first opener wins");
        let g1 = "g1".to_owned();
        assert_eq!(k.admit(c, 10, 100, 3), (1, 70, g1.clone(), 1, 5));
        // The budget refuses: no request counted.
        assert_eq!(k.admit(c, 40, 100, 3), (3, 70, g1.clone(), 1, 5));
        assert_eq!(k.admit(c, 30, 100, 3), (1, 100, g1.clone(), 2, 10));
        assert_eq!(k.admit(c, 0, 100, 3), (1, 100, g1, 3, 15));
        // The rpm refuses: nothing charged to the budget.
        assert_eq!(k.admit(c, 0, 1000, 3).0, 2);
        assert_eq!(k.field(c, &k.budget, "c"), 100);
        k.settle(c, "g1", (-20, 10), -4);
        assert_eq!(k.field(c, &k.budget, "c"), 80);
        assert_eq!(k.field(c, &k.window, "t"), 11);
        // Reopened (another generation): a late settlement adds its real cost.
        let _: () = redis::cmd("DEL").arg(&k.budget).query(c).unwrap();
        assert_eq!(k.open(c, 500, "g2"), 1);
        k.settle(c, "g1", (-20, 30), 0);
        assert_eq!(k.field(c, &k.budget, "c"), 530);
        // Two settlements in one call, each to its own counters.
        let other = Keys {
            budget: format!("{prefix}b2"),
            window: format!("{prefix}w2"),
            fence: format!("{prefix}fence"),
        };
        assert_eq!(other.open(c, 100, "h"), 1);
        let script = redis::Script::new(SETTLE_MANY);
        let mut both = script.prepare_invoke();
        both.key(&k.budget).key(&k.window).arg("1").arg("g2").arg(5).arg(0);
        both.arg("0").arg(0).arg(0);
        both.key(&other.budget).key(&other.window).arg("1").arg("h").arg(-7).arg(0);
        both.arg("0").arg(0).arg(0);
        let _: i64 = both.invoke(c).unwrap();
        assert_eq!(k.field(c, &k.budget, "c"), 535);
        assert_eq!(other.field(c, &other.budget, "c"), 93);
        let _: () = redis::cmd("DEL").arg(&other.budget).query(c).unwrap();
        // Never below 0.
        k.settle(c, "g2", (-1000, 0), -1000);
        assert_eq!(k.field(c, &k.budget, "c"), 0);
        assert_eq!(k.field(c, &k.window, "t"), 0);
        let ttl: i64 = redis::cmd("TTL").arg(&k.window).query(c).unwrap();
        assert!((1..=WINDOW_TTL_SECS).contains(&ttl), "window TTL {ttl}");
        let _: () = redis::cmd("DEL").arg(&k.budget).arg(&k.window).query(c).unwrap();
    }

    /// An upper-bound admission (`k` > 0) is admitted only with room for `k` more such calls
    /// in the budget and the tpm window; else it answers 5 and charges nothing, and the exact
    /// admission (`k` = 0) decides as before.
    #[test]
    fn bound_admissions_keep_their_distance_from_the_limits() {
        let Some(server) = OwnRedis::start() else { return };
        let (mut conn, _, k) = server.keys();
        let c = &mut conn;
        assert_eq!(k.open(c, 0, "g"), 1);
        // Budget 1000, tpm 1000: bound calls of cost 10 and 10 tokens, headroom 4.
        let g = "g".to_owned();
        assert_eq!(k.admit_with(c, (10, 10), (1000, -1, 1000), 4), (1, 10, g.clone(), 1, 10));
        // The budget's room: 960 committed + 10 * 5 > 1000 -> count exactly, nothing charged.
        let _: () = redis::cmd("HSET").arg(&k.budget).arg("c").arg(960).query(c).unwrap();
        assert_eq!(k.admit_with(c, (10, 10), (1000, -1, 1000), 4).0, 5);
        assert_eq!(k.field(c, &k.budget, "c"), 960);
        assert_eq!(k.field(c, &k.window, "r"), 1);
        // The exact count still fits: admitted.
        assert_eq!(k.admit_with(c, (4, 3), (1000, -1, 1000), 0), (1, 964, g.clone(), 2, 13));
        // The tpm window's room: 13 + 200 * 5 > 1000 -> count exactly.
        assert_eq!(k.admit_with(c, (1, 200), (100_000, -1, 1000), 4).0, 5);
        assert_eq!(k.field(c, &k.window, "t"), 13);
        // An rpm refusal needs no count: refused at once.
        assert_eq!(k.admit_with(c, (1, 1), (100_000, 2, 1000), 4).0, 2);
        let _: () = redis::cmd("DEL").arg(&k.budget).arg(&k.window).query(c).unwrap();
    }

    /// While the fence stands no counter opens (the opener learns how long to wait); the
    /// first call on a master's replication id raises the fence, later calls on it do not.
    #[test]
    fn the_fence_holds_openings_back_and_the_first_call_on_a_master_raises_it() {
        let Some(server) = OwnRedis::start() else { return };
        let (mut conn, prefix, k) = server.keys();
        let c = &mut conn;
        let first_on = |c: &mut redis::Connection, epoch: &str, ms: i64| -> i64 {
            let script = redis::Script::new(crate::governance::redis_fence::FIRST_ON_EPOCH);
            let mut invocation = script.key(format!("{prefix}epoch:{epoch}"));
            invocation.key(&k.fence).arg(ms).arg(60).invoke(c).unwrap()
        };
        assert_eq!(first_on(c, "r1", 60_000), 1);
        let waited = k.open(c, 10, "g");
        assert!((-60_000..=-59_000).contains(&waited), "the fence's time left: {waited}");
        assert!(!redis::cmd("EXISTS").arg(&k.budget).query::<bool>(c).unwrap());
        // The same master again: no new fence; a new master: a longer fence wins, a shorter
        // one leaves it.
        let _: () = redis::cmd("DEL").arg(&k.fence).query(c).unwrap();
        assert_eq!(first_on(c, "r1", 60_000), 0);
        assert_eq!(k.open(c, 10, "g"), 1);
        let _: () = redis::cmd("DEL").arg(&k.budget).query(c).unwrap();
        assert_eq!(first_on(c, "r2", 30_000), 1);
        assert_eq!(first_on(c, "r3", 60_000), 1);
        assert!(redis::cmd("PTTL").arg(&k.fence).query::<i64>(c).unwrap() > 30_000);
        assert_eq!(first_on(c, "r4", 1_000), 1);
        assert!(redis::cmd("PTTL").arg(&k.fence).query::<i64>(c).unwrap() > 30_000);
        let _: () = redis::cmd("DEL").arg(&k.fence).query(c).unwrap();
    }
}
