//! The Redis master killed (`kill -9`) under load and its replica promoted by Sentinel: two
//! nodes on one PostgreSQL database count keys' budgets and rpm limits in Redis
//! (`gateway.key_counters = "redis"`) and the named rate-limit policies too
//! (`rate_limit.backend = "redis"`), reaching Redis through three Sentinels
//! (`rate_limit.redis_sentinels`), while 200 concurrent callers spend one budgeted key, paced
//! so that the budget lasts through the failover.
//!
//! Checked: every answer is 200, 429 `budget_exceeded`, or 503 with `Retry-After`; every call
//! answered 200 is in the ledger and the spend stays within the budget; after the failover
//! both nodes count in the new master: the key's budget counter there is named by the new
//! master's replication id (the replica's copy of the old master's counter, which may lack
//! its last admissions, is not used), and a fresh key's `rpm_limit` of 4 holds across the two
//! nodes, its window in the new master. The promotion time, the answers, the longest call,
//! the fallbacks and the spend are printed.

use super::sentinel_cluster::{connection, info_field, SentinelCluster, MASTER_NAME};
use super::{calls_reach, ledger_spend, spend, Answers};
use crate::budgets::{budget_key, cost_of_one_call, early_in_a_minute, priced_providers};
use crate::common::eventually::eventually;
use crate::common::*;
use crate::observability::{scrape, value};
use aigw_http::settings::Settings;
use aigw_service::governance::key_counters::KeyCounters;
use aigw_service::rate_limit::config::{PolicyConfig, RateLimitBackend};
use serde_json::json;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Concurrent callers.
const CALLERS: usize = 200;
/// Seconds between one caller's calls: about 100 calls a second in all.
const PAUSE: Duration = Duration::from_secs(2);
/// Calls the budget allows: about 15 s of calls, several times the failover's length.
const BUDGET_CALLS: f64 = 1500.0;
/// Calls answered before the master is killed.
const CALLS_BEFORE: usize = 300;

/// The names in `port`'s Redis that start with `pattern`'s fixed part (`KEYS`).
fn names(port: u16, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS").arg(pattern).query(&mut connection(port)).unwrap()
}

/// Waits until both nodes count in Redis again (`aigw_redis_up` 1 after a call of `key`).
async fn back_on_redis(nodes: [&TestApp; 2], key: &str) {
    eventually("both nodes back on Redis", Duration::from_secs(30), || async {
        let mut up = Vec::new();
        for node in nodes {
            let reply = node.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
            assert_eq!(reply.status, 200, "{}", reply.text);
            up.push(value(&scrape(node).await, "aigw_redis_up", &[]));
        }
        if up == [1.0, 1.0] {
            Ok(())
        } else {
            Err(up)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_master_killed_under_load_overspends_nothing_and_limits_are_shared_after() {
    let Some(mut cluster) = tokio::task::block_in_place(SentinelCluster::start) else { return };
    let (old_master, new_master) = cluster.ports();
    let prefix = format!("aigw-test:{}:", uuid::Uuid::now_v7().simple());
    let clock = aigw_service::Clock::adjustable();
    let sentinels = cluster.sentinel_urls();
    let node = |s: &mut Settings| {
        priced_providers(s);
        s.gateway.key_counters = KeyCounters::Redis;
        s.rate_limit.enabled = true;
        s.rate_limit.backend = RateLimitBackend::Redis;
        s.rate_limit.policies.ai = PolicyConfig::new(1_000_000, 60);
        s.rate_limit.redis_sentinels = sentinels.clone();
        s.rate_limit.redis_sentinel_master = MASTER_NAME.to_owned();
        s.rate_limit.redis_key_prefix = prefix.clone();
        s.rate_limit.redis_retry_secs = 1;
        s.clock = clock.clone();
    };
    let a = Arc::new(spawn_app_with(Backend::Postgres, node).await);
    let b = Arc::new(a.spawn_sibling(node).await);
    let user = a.new_user("sentinel").await;
    let cost = cost_of_one_call(&a, &user.token).await;
    let budget = BUDGET_CALLS * cost;
    let made = budget_key(&a, &user.token, budget, "monthly").await;
    let key: Arc<str> = made["key"].as_str().unwrap().into();
    let id = made["id"].as_str().unwrap().to_owned();
    let old_epoch = info_field(old_master, "replication", "master_replid").unwrap();

    let ok = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_secs(90);
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let node = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(spend(node, key.clone(), ok.clone(), until, PAUSE))
        })
        .collect();
    calls_reach(&ok, CALLS_BEFORE).await;
    let counters = names(old_master, &format!("{prefix}kc:{{{id}}}:b:*"));
    assert!(
        counters.iter().any(|n| n.contains(&old_epoch)),
        "the budget counter is not in the master under its replication id: {counters:?}"
    );
    let killed_at = Instant::now();
    let promotion = tokio::task::block_in_place(|| {
        cluster.kill_master();
        cluster.wait_for_promotion()
    });
    let mut answers: Answers = Vec::new();
    for caller in callers {
        answers.extend(caller.await.unwrap());
    }
    answers.sort_by_key(|a| a.at);
    let count = |status: u16| answers.iter().filter(|a| a.status == status).count();
    let (ok_calls, refused, unavailable) = (count(200), count(429), count(503));
    let before = answers.iter().filter(|a| a.status == 200 && a.at < killed_at).count();
    let last = answers.last().map_or(0.0, |a| (a.at - killed_at).as_secs_f64());
    let longest = |during: bool| {
        let calls = answers.iter().filter(|a| (a.at >= killed_at) == during);
        calls.map(|a| a.took.as_secs_f64()).fold(0.0, f64::max)
    };
    let (longest_before, longest_after) = (longest(false), longest(true));
    let mut fallbacks = 0.0;
    for node in [&a, &b] {
        fallbacks += value(&scrape(node).await, "aigw_rate_limit_memory_fallbacks_total", &[]);
    }
    eprintln!(
        "sentinel: {before} calls served before the kill, promotion after {promotion:.2} s, \
         {ok_calls} served in all, {unavailable} answered 503, {refused} refused by the budget, \
         the last answer {last:.2} s after the kill, {fallbacks} calls decided without Redis"
    );
    eprintln!(
        "sentinel: the longest call took {longest_before:.2} s before the kill, \
         {longest_after:.2} s after it"
    );
    assert!(refused > 0, "the budget ran out before the deadline");
    assert!(last > promotion, "the budget ran out before the failover ended");

    // Every served call is in the ledger, and the spend is within the budget.
    let spent = ledger_spend(&a, &user.token, &id, ok_calls).await;
    eprintln!("sentinel: spent {spent:.6} of a {budget:.6} USD budget ({cost:.6} a call)");
    assert!(spent <= budget + 1e-9, "overspent: {spent} of {budget}");

    // The new master holds the key's counter under its own replication id.
    let new_epoch = info_field(new_master, "replication", "master_replid").unwrap();
    assert_ne!(new_epoch, old_epoch);
    let counters = names(new_master, &format!("{prefix}kc:{{{id}}}:b:*"));
    assert!(
        counters.iter().any(|n| n.contains(&new_epoch)),
        "no budget counter under the new master's replication id: {counters:?}"
    );

    // Both nodes count in the new master again: a fresh key's rpm_limit holds across them.
    let open = a.key(&user.token, &["ai_gateway"]).await;
    back_on_redis([&a, &b], &open).await;
    let limited = a
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "rpm", "permissions": ["ai_gateway"], "rpm_limit": 4}),
        )
        .await
        .data(201);
    let (limited_key, limited_id) =
        (limited["key"].as_str().unwrap(), limited["id"].as_str().unwrap());
    early_in_a_minute(&clock);
    for node in [&a, &b, &a, &b] {
        let reply = node.chat(Auth::Bearer(limited_key), &chat_body("priced", "hi")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    for node in [&a, &b] {
        let refused = node.chat(Auth::Bearer(limited_key), &chat_body("priced", "hi")).await;
        refused.error(429, "rate_limit_exceeded");
    }
    let windows = names(new_master, &format!("{prefix}kc:{{{limited_id}}}:w:*"));
    assert_eq!(windows.len(), 1, "{windows:?}");
    let requests: String =
        redis::cmd("HGET").arg(&windows[0]).arg("r").query(&mut connection(new_master)).unwrap();
    assert_eq!(requests, "4", "the rpm window in the new master");
    drop(b);
    drop(a);
    drop(cluster);
}
