//! Key limits with leases (docs/budgets.md "Leases"): far from its limits a node
//! takes 16 calls' worth of a key's budget, tokens and requests from the shared counters (the
//! database's or Redis') at once and admits calls from it. The limits must still hold to the
//! call, on two nodes, and what a lease does not use must go back: a budget of 300 calls or an
//! `rpm_limit` of 100 passes exactly that many calls, spent one by one over two nodes,
//! whatever leases were taken on the way.

use crate::budgets::{
    cost_of_one_call, early_in_a_minute, header_i64, priced_providers, two_nodes_on_one_clock,
};
use crate::common;
use crate::key_counters_redis::RedisCounters;
use crate::rate_limit_contract::RedisServer;

use aigw_http::settings::Settings;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

backend_tests!(
    database_leases_spend_a_budget_of_300_calls_exactly_on_two_nodes,
    database_leases_spend_an_rpm_limit_of_100_calls_exactly_on_two_nodes,
    database_leases_give_back_what_they_did_not_use,
    database_leases_ask_for_the_next_one_when_half_used,
    redis_leases_spend_a_budget_of_300_calls_exactly_on_two_nodes,
    redis_leases_spend_an_rpm_limit_of_100_calls_exactly_on_two_nodes,
    redis_leases_give_back_what_they_did_not_use,
    redis_leases_ask_for_the_next_one_when_half_used,
);

type Tweak<'a> = &'a (dyn Fn(&mut Settings) + Sync);

/// A key of `user` with `policy` (JSON fields of the key), returning (id, key).
async fn key_with(app: &TestApp, token: &str, policy: Value) -> (String, String) {
    let mut body = json!({"name": "leased", "permissions": ["ai_gateway", "read"]});
    body.as_object_mut().unwrap().extend(policy.as_object().unwrap().clone());
    let made = app.create_key_raw(Auth::Bearer(token), &body).await.data(201);
    (made["id"].as_str().unwrap().to_owned(), made["key"].as_str().unwrap().to_owned())
}

/// Where a test's key counters are: the database's or Redis'.
#[derive(Clone, Copy)]
enum Counted<'a> {
    Database,
    Redis(&'a RedisCounters),
}

/// The requests and tokens counted in the rate windows of the test's one key (leases
/// included) in the shared counters.
async fn windows(app: &TestApp, counted: Counted<'_>) -> (i64, i64) {
    let Counted::Redis(counters) = counted else {
        use aigw_persistence::pool::{DatabaseUrl, Pool, PoolOptions};
        use aigw_persistence::schema::key_rate_windows as w;
        use diesel::{QueryDsl, RunQueryDsl};
        let url = DatabaseUrl::parse(&app.database_url).unwrap();
        let rows: Vec<(i64, i64)> = tokio::task::spawn_blocking(move || {
            let mut conn =
                Pool::new(&url, &PoolOptions::default()).unwrap().dedicated_connection().unwrap();
            w::table.select((w::requests, w::tokens)).load(&mut conn).unwrap()
        })
        .await
        .unwrap();
        return rows.iter().fold((0, 0), |(r, t), row| (r + row.0, t + row.1));
    };
    let field = |w: &std::collections::HashMap<String, String>, name: &str| {
        w.get(name).map_or(0, |v| v.parse::<i64>().unwrap())
    };
    counters.hashes(":w:").values().fold((0, 0), |(r, t), w| (r + field(w, "r"), t + field(w, "t")))
}

/// Calls `n` times one after the other, alternating between `nodes`: every call must pass;
/// then one more on each node must answer 429 `code`.
async fn spend_exactly(nodes: &[&TestApp], key: &str, n: usize, code: &str) {
    for i in 0..n {
        let reply =
            nodes[i % nodes.len()].chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
        assert_eq!(reply.status, 200, "call {i} of {n}: {}", reply.text);
    }
    for node in nodes {
        let refused = node.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
        refused.error(429, code);
    }
}

/// A budget of 300 calls (each call's worst case is its real cost), spent on two nodes:
/// leases are taken at an upper bound of 37/8 of a call while the key is far from the
/// budget, and every call is counted exactly near it; 300 pass, the 301st does not.
async fn budget_of_300_calls(backend: Backend, tweak: Tweak<'_>) {
    let app = spawn_app_with(backend, tweak).await;
    let node_b = app.spawn_sibling(tweak).await;
    let user = app.new_user("lease-budget").await;
    let cost = cost_of_one_call(&app, &user.token).await;
    let policy = json!({"max_budget_usd": 300.0 * cost, "budget_period": "total"});
    let (_, key) = key_with(&app, &user.token, policy).await;
    spend_exactly(&[&app, &node_b], &key, 300, "budget_exceeded").await;
}

/// An `rpm_limit` of 100 spent on two nodes: each takes leases of 16 requests while 48 more
/// fit; 100 calls pass in the minute, the 101st does not.
async fn rpm_limit_of_100_calls(backend: Backend, tweak: Tweak<'_>) {
    let (app, node_b, clock) = two_nodes_on_one_clock(backend, tweak).await;
    let user = app.new_user("lease-rpm").await;
    let (_, key) = key_with(&app, &user.token, json!({"rpm_limit": 100})).await;
    early_in_a_minute(&clock);
    spend_exactly(&[&app, &node_b], &key, 100, "rate_limit_exceeded").await;
}

/// A call on node A takes a lease of 16 requests and 16 upper bounds of tokens: node B's
/// first call sees them counted (and its own lease). Once both leases have ended (1 s), what
/// they did not use is back in the window: the next call's headers count the two calls'
/// requests and real tokens, and its own upper bound.
async fn give_back(backend: Backend, tweak: Tweak<'_>, counted: Counted<'_>) {
    let (app, node_b, clock) = two_nodes_on_one_clock(backend, tweak).await;
    let user = app.new_user("lease-back").await;
    let (rpm, tpm) = (1000, 1_000_000_000);
    let (_, key) = key_with(&app, &user.token, json!({"rpm_limit": rpm, "tpm_limit": tpm})).await;
    let mut body = chat_body("priced", "hi");
    body["max_tokens"] = json!(100);
    // The upper bound: the fixed tokens (7) and one per byte of the body, plus max_tokens.
    let bound = 7 + serde_json::to_vec(&body).unwrap().len() as i64 + 100;
    let remaining = |reply: &Reply| {
        (
            header_i64(reply, "x-ratelimit-remaining-requests"),
            header_i64(reply, "x-ratelimit-remaining-tokens"),
        )
    };
    early_in_a_minute(&clock);
    let first = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(remaining(&first), (rpm - 1, tpm - bound));
    let used = first.json()["usage"]["total_tokens"].as_i64().unwrap();
    assert!(used < bound, "{used}");
    // Node B: A's lease (16) and its own (16, one used) are counted.
    let second = node_b.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(second.status, 200, "{}", second.text);
    assert_eq!(remaining(&second), (rpm - 17, tpm - 17 * bound));
    // Leases end 1 s after they were taken, found by a sweep every 250 ms; their give-back
    // is written in the background: then the counters hold the two calls only.
    let given_back = || async {
        match windows(&app, counted).await {
            (2, tokens) if tokens == 2 * used => Ok(()),
            other => Err(other),
        }
    };
    let what = "the leases were not given back (requests, tokens)";
    eventually(what, Duration::from_secs(10), given_back).await;
    let third = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(third.status, 200, "{}", third.text);
    // Without the give-back: 1000 - 48 + 15 requests, tpm - 48 bounds + 15 bounds tokens.
    assert_eq!(remaining(&third), (rpm - 3, tpm - 2 * used - bound));
}

/// Once half of a lease is used, the node asks for the next one in the background, so that a
/// busy key's calls do not wait for the counters: after 9 of node A's calls (its lease of 16
/// has 7 left), node B's first call sees A's current and next leases counted (16 + at least
/// 16: twice as many when A used the first one fast) and its own (16, one used).
async fn next_lease(backend: Backend, tweak: Tweak<'_>, counted: Counted<'_>) {
    let (app, node_b, clock) = two_nodes_on_one_clock(backend, tweak).await;
    let user = app.new_user("lease-next").await;
    let rpm = 1000;
    let (_, key) = key_with(&app, &user.token, json!({"rpm_limit": rpm})).await;
    let body = chat_body("priced", "hi");
    early_in_a_minute(&clock);
    for i in 0..9 {
        let reply = app.chat(Auth::Bearer(&key), &body).await;
        assert_eq!(reply.status, 200, "call {i}: {}", reply.text);
        assert_eq!(header_i64(&reply, "x-ratelimit-remaining-requests"), rpm - 1 - i);
    }
    // The next lease is granted in the background: the counters hold both of A's leases.
    let granted = || async {
        match windows(&app, counted).await {
            (32.., _) => Ok(()),
            other => Err(other),
        }
    };
    eventually("node A's next lease was not granted", Duration::from_secs(5), granted).await;
    let on_b = node_b.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(on_b.status, 200, "{}", on_b.text);
    // Without the next lease: rpm - 16 - 1.
    let remaining = header_i64(&on_b, "x-ratelimit-remaining-requests");
    assert!(remaining <= rpm - 33, "remaining {remaining}: node A's next lease is not counted");
    assert!(remaining >= rpm - 49, "remaining {remaining}");
    // Node A goes on from its current lease, then the next one: its headers count from them.
    let tenth = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(tenth.status, 200, "{}", tenth.text);
    assert_eq!(header_i64(&tenth, "x-ratelimit-remaining-requests"), rpm - 10);
}

async fn database_leases_spend_a_budget_of_300_calls_exactly_on_two_nodes(backend: Backend) {
    budget_of_300_calls(backend, &priced_providers).await;
}

async fn database_leases_spend_an_rpm_limit_of_100_calls_exactly_on_two_nodes(backend: Backend) {
    rpm_limit_of_100_calls(backend, &priced_providers).await;
}

async fn database_leases_give_back_what_they_did_not_use(backend: Backend) {
    give_back(backend, &priced_providers, Counted::Database).await;
}

async fn database_leases_ask_for_the_next_one_when_half_used(backend: Backend) {
    next_lease(backend, &priced_providers, Counted::Database).await;
}

async fn redis_leases_ask_for_the_next_one_when_half_used(backend: Backend) {
    let Some(redis) = RedisServer::start() else { return };
    let counters = RedisCounters::new(&redis);
    next_lease(backend, &|s| counters.apply(s), Counted::Redis(&counters)).await;
    assert_eq!(counters.hashes(":w:").len(), 1, "counted in Redis");
}

async fn redis_leases_spend_a_budget_of_300_calls_exactly_on_two_nodes(backend: Backend) {
    let Some(redis) = RedisServer::start() else { return };
    let counters = RedisCounters::new(&redis);
    budget_of_300_calls(backend, &|s| counters.apply(s)).await;
    assert!(!counters.hashes(":b:").is_empty(), "counted in Redis");
}

async fn redis_leases_spend_an_rpm_limit_of_100_calls_exactly_on_two_nodes(backend: Backend) {
    let Some(redis) = RedisServer::start() else { return };
    let counters = RedisCounters::new(&redis);
    rpm_limit_of_100_calls(backend, &|s| counters.apply(s)).await;
    let windows = counters.hashes(":w:");
    assert_eq!(windows.len(), 1, "{windows:?}");
    assert_eq!(windows.values().next().unwrap()["r"], "100", "{windows:?}");
}

async fn redis_leases_give_back_what_they_did_not_use(backend: Backend) {
    let Some(redis) = RedisServer::start() else { return };
    let counters = RedisCounters::new(&redis);
    give_back(backend, &|s| counters.apply(s), Counted::Redis(&counters)).await;
    assert_eq!(counters.hashes(":w:").len(), 1, "counted in Redis");
}
