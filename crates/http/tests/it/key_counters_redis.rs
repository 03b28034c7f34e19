//! With `gateway.key_counters = "redis"`: keys' budgets and rpm limits counted in
//! Redis by one script per call, exact on one node and on two nodes sharing the database and
//! Redis; during a Redis outage the database counters enforce the budget, and after it the
//! counters charged in the database are reconciled. Each test runs its own `redis-server`
//! (so that it can stop it) and its own key prefix; every test also reads the counters in
//! Redis, so that a silent fallback to the database cannot pass for Redis.

use crate::budgets::{
    budget_key, cost_of_one_call, fifty_concurrent_calls, fire, one_call_holding, priced_providers,
    rpm_limit_across_two_nodes, wait_for_spend, BOUND_TEST_BOUND, BOUND_TEST_CAP, BOUND_TEST_EXACT,
};
use crate::common;
use crate::observability::{expect_all, scrape};
use crate::rate_limit_contract::RedisServer;

use aigw_http::settings::Settings;
use aigw_service::governance::key_counters::KeyCounters;
use common::*;
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};

backend_tests!(
    redis_counters_hold_fifty_concurrent_calls_on_one_node,
    redis_counters_hold_fifty_concurrent_calls_on_two_nodes,
    redis_counters_hold_rpm_limit_across_two_nodes,
    redis_outage_falls_back_to_the_database_and_reconciles,
    redis_admits_at_a_bound_far_from_the_limits_and_counts_exactly_near_them,
);

/// The settings of a node counting keys in `redis`, under a key prefix of this test's own.
pub(crate) struct RedisCounters {
    url: String,
    prefix: String,
}

impl RedisCounters {
    pub(crate) fn new(redis: &RedisServer) -> Self {
        Self { url: redis.url(), prefix: format!("aigw-test:{}:", uuid::Uuid::now_v7().simple()) }
    }

    /// [`priced_providers`] with the key counters in Redis.
    pub(crate) fn apply(&self, s: &mut Settings) {
        priced_providers(s);
        s.gateway.key_counters = KeyCounters::Redis;
        s.rate_limit.redis_url = self.url.clone();
        s.rate_limit.redis_retry_secs = 1;
        s.rate_limit.redis_key_prefix = self.prefix.clone();
    }

    fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url.as_str()).unwrap().get_connection().unwrap()
    }

    /// Every hash under this prefix whose name contains `part` (`:b:` budget counters, `:w:`
    /// rate windows), by name.
    pub(crate) fn hashes(&self, part: &str) -> HashMap<String, HashMap<String, String>> {
        let mut conn = self.connection();
        let names: Vec<String> =
            redis::cmd("KEYS").arg(format!("{}*", self.prefix)).query(&mut conn).unwrap();
        names
            .into_iter()
            .filter(|n| n.contains(part))
            .map(|n| {
                let fields = redis::cmd("HGETALL").arg(&n).query(&mut conn).unwrap();
                (n, fields)
            })
            .collect()
    }

    /// The committed micro-USD of the test's one budget counter (counters are named by key
    /// and period, not by limit: `limit_micros` is only checked against the committed sum).
    fn committed(&self, limit_micros: i64) -> i64 {
        let counters: Vec<_> = self.hashes(":b:").into_iter().collect();
        assert_eq!(counters.len(), 1, "budget counters in Redis: {counters:?}");
        let committed: i64 = counters[0].1["c"].parse().unwrap();
        assert!(committed <= limit_micros, "{committed} committed past {limit_micros}");
        committed
    }

    /// Makes Redis answer nothing for `pause` (CLIENT PAUSE: its data stays).
    fn pause(&self, pause: Duration) {
        let mut conn = self.connection();
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(pause.as_millis() as u64)
            .arg("ALL")
            .query(&mut conn)
            .unwrap();
    }
}

fn micros(usd: f64) -> i64 {
    (usd * 1_000_000.0).round() as i64
}

async fn redis_counters_hold_fifty_concurrent_calls_on_one_node(backend: Backend) {
    let Some(redis) = RedisServer::start() else {
        return; // said loudly by RedisServer::start (and a failure under CI)
    };
    let counters = RedisCounters::new(&redis);
    let app = spawn_app_with(backend, |s| counters.apply(s)).await;
    let cost = fifty_concurrent_calls(&[&app]).await;
    // Counted in Redis: the 10 worst cases (here also the real costs).
    assert_eq!(counters.committed(micros(10.0 * cost)), micros(10.0 * cost));
}

async fn redis_counters_hold_fifty_concurrent_calls_on_two_nodes(backend: Backend) {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let counters = RedisCounters::new(&redis);
    let app = spawn_app_with(backend, |s| counters.apply(s)).await;
    let node_b = app.spawn_sibling(|s| counters.apply(s)).await;
    let cost = fifty_concurrent_calls(&[&app, &node_b]).await;
    assert_eq!(counters.committed(micros(10.0 * cost)), micros(10.0 * cost));
}

async fn redis_counters_hold_rpm_limit_across_two_nodes(backend: Backend) {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let counters = RedisCounters::new(&redis);
    let (_app, id) = rpm_limit_across_two_nodes(backend, &|s| counters.apply(s)).await;
    // One window in Redis, holding the 4 admitted calls (refusals count nothing).
    let windows = counters.hashes(":w:");
    assert_eq!(windows.len(), 1, "{windows:?}");
    let (name, window) = windows.into_iter().next().unwrap();
    assert!(name.contains(&id), "{name}");
    assert_eq!(window["r"], "4", "{window:?}");
}

async fn redis_outage_falls_back_to_the_database_and_reconciles(backend: Backend) {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let counters = RedisCounters::new(&redis);
    let app = spawn_app_with(backend, |s| counters.apply(s)).await;
    let user = app.new_user("redis-outage").await;
    let cost = cost_of_one_call(&app, &user.token).await;
    let made = budget_key(&app, &user.token, 6.0 * cost, "monthly").await;
    let (id, key) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    assert_eq!(fire(&[&app], key, 2).await, (2, 0));
    wait_for_spend(&app, &user.token, id, 2.0 * cost).await;
    assert_eq!(counters.committed(micros(6.0 * cost)), micros(2.0 * cost));

    // Redis stops answering, its counters kept (2 calls). The first call waits for Redis'
    // timeout, then the ledger's lag (the database's counter opens only once every call Redis
    // admitted is written: flush, lease and margin, 2.25 s), then the database counts (opened
    // from the ledger: 2 calls); the calls after it go to the database at once, concurrent
    // and still exact: 4 of 6 fit.
    let outage = Duration::from_secs(5);
    let resumes = Instant::now() + outage;
    counters.pause(outage);
    assert_eq!(fire(&[&app], key, 1).await, (1, 0));
    assert_eq!(fire(&[&app], key, 5).await, (3, 2), "the budget holds without Redis");
    assert!(Instant::now() < resumes, "the outage ended too early for this test");
    // Each of the 6 calls counted as a fallback.
    expect_all(
        &scrape(&app).await,
        &[("aigw_redis_up", &[], 0.0), ("aigw_rate_limit_memory_fallbacks_total", &[], 6.0)],
    );

    // Redis answers again, its counter still at 2 calls (or 3: the script of the call that
    // timed out ran when the pause ended). Once the node retries Redis it reconciles: the
    // counter reopens from the ledger (6 calls), so nothing more passes.
    wait_for_spend(&app, &user.token, id, 6.0 * cost).await;
    // Real time: Redis's CLIENT PAUSE ends on Redis's clock, and the node tries Redis again
    // `redis_retry_secs` (1 s) after its last failure, on its own monotonic clock.
    let retried = resumes.saturating_duration_since(Instant::now()) + Duration::from_millis(1100);
    tokio::time::sleep(retried).await;
    assert_eq!(fire(&[&app], key, 3).await, (0, 3), "the outage's calls count after it");
    assert_eq!(counters.committed(micros(6.0 * cost)), micros(6.0 * cost));
    expect_all(&scrape(&app).await, &[("aigw_redis_up", &[], 1.0)]);

    // A higher budget keeps the counter (6 calls, running ones included): 2 more calls fit.
    app.patch_key(Auth::Bearer(&user.token), id, &json!({"max_budget_usd": 8.0 * cost}))
        .await
        .data(200);
    assert_eq!(fire(&[&app], key, 4).await, (2, 2));
    assert_eq!(counters.committed(micros(8.0 * cost)), micros(8.0 * cost));
    drop(redis);
}

/// Far from its limits a key's call is reserved at an upper bound of its prompt (one token
/// per byte of the texts: no tokenizer); 32 such calls from the `tpm_limit` it is counted
/// with the tokenizer. Either way it settles to the real tokens and cost, in Redis too.
async fn redis_admits_at_a_bound_far_from_the_limits_and_counts_exactly_near_them(
    backend: Backend,
) {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let counters = RedisCounters::new(&redis);
    let app = spawn_app_with(backend, |s| counters.apply(s)).await;
    let user = app.new_user("redis-bound").await;
    let cost = cost_of_one_call(&app, &user.token).await;
    let (exact, bound) = (BOUND_TEST_EXACT + BOUND_TEST_CAP, BOUND_TEST_BOUND + BOUND_TEST_CAP);
    for (tpm, held) in [(1_000_000_000, bound), (3 * exact, exact)] {
        let id = one_call_holding(&app, &user.token, tpm, held).await;
        // Settled in Redis to the real tokens and cost.
        let settled = || {
            let windows = counters.hashes(":w:");
            let window = windows.iter().find(|(name, _)| name.contains(&id)).map(|(_, w)| w);
            let tokens = window.and_then(|w| w.get("t")).map(|t| t.parse::<i64>().unwrap());
            let committed = counters.committed(micros(1000.0 * cost));
            let done = tokens.is_some_and(|t| t < held) && committed == micros(cost);
            std::future::ready(if done { Ok(()) } else { Err((tokens, committed)) })
        };
        eventually("not settled (tokens, committed)", Duration::from_secs(5), settled).await;
        let _ = redis::cmd("DEL")
            .arg(counters.hashes(":b:").into_keys().collect::<Vec<_>>())
            .query::<()>(&mut counters.connection());
    }
}
