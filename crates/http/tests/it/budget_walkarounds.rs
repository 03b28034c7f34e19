//! Budgets that hold against every caller, probed as a hostile key holder would: two nodes on
//! one database (and one Redis, with `gateway.key_counters = "redis"`), and a fake upstream
//! (`up-bill`) that bills `n` completions of `max_tokens` each and counts `tools` as prompt
//! tokens. Every probe must end at or under the budget: many completions per call, large tool
//! definitions, a PATCH of the budget while calls run, Redis restarted while calls run, prompts
//! an upstream with another tokenizer bills at a token per byte (`up-bytes`); and out-of-range
//! caps are refused with 400, never 503.

use crate::common;
use crate::common::upstream::FakeUpstream;
use crate::key_counters_redis::RedisCounters;
use crate::rate_limit_contract::RedisServer;

use aigw_http::settings::Settings;
use aigw_service::{PriceConfig, ProviderConfig, ProviderKind, TokenizerConfig, TokenizerName};
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

backend_tests!(
    many_completions_per_call_stay_within_the_budget,
    large_tool_definitions_stay_within_the_budget,
    a_patch_while_calls_run_keeps_them_counted,
    a_redis_restart_while_calls_run_keeps_them_counted,
    out_of_range_caps_are_refused_naming_the_field,
    a_burst_admits_what_fits,
    one_large_prompt_cannot_pass_the_budget_of_a_model_without_a_declared_tokenizer,
    a_clamped_call_of_a_model_without_a_declared_tokenizer_stays_within_the_budget,
    concurrent_calls_billed_a_token_per_byte_spend_at_most_the_budget,
);

/// USD per million tokens of `up-bill`, prompt and completion alike: one token costs 100
/// micro-USD.
const USD_PER_MILLION: f64 = 100.0;

/// The budget of every probe, USD: 8 000 tokens.
const BUDGET: f64 = 0.80;

/// A node calling `upstream`'s `up-bill` and `up-bytes` at [`USD_PER_MILLION`], with its key
/// counters in `redis` when given (else the database), writing usage and calls in flight every
/// 20 ms. `up-bill` bills prompts at about the `cl100k_base` count and is declared to count
/// with it (these probes are about concurrency, not the tokenizer's margin); `up-bytes`, billed
/// a token per byte, declares no tokenizer, as an OpenAI-compatible server of another vendor's
/// model.
pub(crate) fn billing<'a>(
    upstream: &'a str,
    redis: Option<&'a RedisCounters>,
) -> impl Fn(&mut Settings) + 'a {
    move |s: &mut Settings| {
        if let Some(redis) = redis {
            redis.apply(s);
        }
        let price = PriceConfig {
            input_per_million: USD_PER_MILLION,
            output_per_million: USD_PER_MILLION,
            image_tokens: None,
            ..PriceConfig::default()
        };
        s.providers = vec![ProviderConfig {
            name: "bill".into(),
            kind: ProviderKind::Openai,
            base_url: Some(upstream.to_owned()),
            api_key: None,
            models: vec!["up-bill".into(), "up-bytes".into()],
            tokenizers: BTreeMap::from([(
                "up-bill".to_owned(),
                TokenizerConfig {
                    tokenizer: Some(TokenizerName::Cl100kBase),
                    tokens_per_byte: None,
                },
            )]),
            prices: BTreeMap::from([("up-bill".to_owned(), price), ("up-bytes".to_owned(), price)]),
            ..ProviderConfig::default()
        }];
        s.usage.flush_interval_ms = 20;
    }
}

/// Two nodes on one database; the second dropped first.
pub(crate) struct Cluster {
    pub(crate) b: TestApp,
    pub(crate) a: TestApp,
    pub(crate) upstream: FakeUpstream,
}

pub(crate) async fn cluster(backend: Backend, redis: Option<&RedisCounters>) -> Cluster {
    let upstream = FakeUpstream::start().await;
    let a = spawn_app_with(backend, billing(&upstream.base_url, redis)).await;
    let b = a.spawn_sibling(billing(&upstream.base_url, redis)).await;
    Cluster { b, a, upstream }
}

/// A user of `app` and a key with a [`BUDGET`] of `total` period: (token, key id, key).
async fn budget_key(app: &TestApp, name: &str) -> (String, String, String) {
    budget_key_of(app, name, BUDGET).await
}

/// [`budget_key`] with a budget of `usd`.
async fn budget_key_of(app: &TestApp, name: &str, usd: f64) -> (String, String, String) {
    let user = app.new_user(name).await;
    let (id, key) = key_for(app, &user.token, usd).await;
    (user.token, id, key)
}

/// A key of the user of `token` with a budget of `usd` and `total` period: (id, key).
async fn key_for(app: &TestApp, token: &str, usd: f64) -> (String, String) {
    let made = app
        .create_key_raw(
            Auth::Bearer(token),
            &json!({"name": "probe", "permissions": ["ai_gateway", "read"],
                    "max_budget_usd": usd, "budget_period": "total"}),
        )
        .await
        .data(201);
    (made["id"].as_str().unwrap().to_owned(), made["key"].as_str().unwrap().to_owned())
}

/// Sends `body` `n` times at once, alternately to each node; returns how many got 200
/// (every other answer must be 429 `budget_exceeded`).
async fn fire(nodes: [&TestApp; 2], key: &str, body: &Value, n: usize) -> usize {
    let calls = (0..n).map(|i| {
        let node = nodes[i % 2];
        let request = node
            .request(reqwest::Method::POST, "/api/v1/ai/chat/completions", Auth::Bearer(key))
            .json(body);
        async move { node.send(request).await }
    });
    let mut ok = 0;
    for reply in futures_util::future::join_all(calls).await {
        match reply.status {
            200 => ok += 1,
            429 => {
                reply.error(429, "budget_exceeded");
            }
            other => panic!("unexpected {other}: {}", reply.text),
        }
    }
    ok
}

/// The ledger's spend of the key `id`, USD, once it holds `calls` records (what the
/// upstream billed for each answered call).
async fn spent(app: &TestApp, token: &str, calls: usize) -> f64 {
    let records = eventually("every answered call recorded", Duration::from_secs(10), || async {
        let page = app.get("/api/v1/usage/requests?limit=100", Auth::Bearer(token)).await;
        let records = page.data(200)["requests"].as_array().cloned().unwrap_or_default();
        if records.len() >= calls {
            Ok(records)
        } else {
            Err(format!("{} of {calls} records", records.len()))
        }
    })
    .await;
    assert_eq!(records.len(), calls, "one record per answered call: {records:?}");
    records.iter().map(|r| r["cost_usd"].as_f64().unwrap()).sum()
}

fn assert_within_budget(spent: f64, budget: f64, what: &str) {
    assert!(spent <= budget + 1e-9, "{what}: spent ${spent:.4} of a ${budget:.2} budget");
}

/// One call with `"n": 100` is billed 100 completions: the worst case counts them all, so
/// at most one such call fits in the budget, on two nodes and 200 calls at once.
async fn many_completions_per_call_stay_within_the_budget(backend: Backend) {
    let nodes = cluster(backend, None).await;
    let (token, _, key) = budget_key(&nodes.a, "n100").await;
    let body = json!({"model": "up-bill", "n": 100, "max_tokens": 50,
                      "messages": [{"role": "user", "content": "write a haiku"}]});
    let ok = fire([&nodes.a, &nodes.b], &key, &body, 200).await;
    assert_eq!(ok, 1, "5 000 completion tokens ($0.50) fit once in $0.80");
    assert_within_budget(spent(&nodes.a, &token, ok).await, BUDGET, "n = 100");
}

/// Tool definitions are billed as prompt tokens: 100 of them (about 42 KB, 10 500 billed
/// tokens) cannot fit in 8 000 tokens, not even one of 200 at once, and 200 calls with 10 of
/// them spend at most the budget.
async fn large_tool_definitions_stay_within_the_budget(backend: Backend) {
    let nodes = cluster(backend, None).await;
    let (token, _, key) = budget_key(&nodes.a, "tools").await;
    let tool = |i: usize| {
        json!({"type": "function", "function": {
            "name": format!("lookup_record_{i:03}"),
            "description": "Looks a customer record up by its identifier and returns every field \
                            of it, including the billing address, the shipping address and the \
                            full order history, for the support agent to read.",
            "parameters": {"type": "object", "properties": {
                "id": {"type": "string", "description": "the customer's identifier"},
                "fields": {"type": "array", "items": {"type": "string"}}},
                "required": ["id"]}}})
    };
    let with_tools = |n: usize| {
        json!({"model": "up-bill", "max_tokens": 16, "tools": (0..n).map(tool).collect::<Vec<_>>(),
               "messages": [{"role": "user", "content": "find customer 42"}]})
    };
    let big = with_tools(100);
    assert!(big.to_string().len() > 40_000);
    assert!(common::upstream::billed_prompt(&big) > 10_000);
    assert_eq!(fire([&nodes.a, &nodes.b], &key, &big, 200).await, 0, "never fits");
    let ok = fire([&nodes.a, &nodes.b], &key, &with_tools(10), 200).await;
    assert!(ok >= 1, "10 tools fit at least once");
    assert_within_budget(spent(&nodes.a, &token, ok).await, BUDGET, "tools");
}

/// A call of `max_tokens` completion tokens that the upstream answers after `delay_ms`; its
/// prompt counts 8 tokens.
pub(crate) fn slow_call(delay_ms: u64, max_tokens: u64) -> Value {
    json!({"model": "up-bill", "max_tokens": max_tokens,
           "metadata": {"delay_ms": delay_ms.to_string()},
           "messages": [{"role": "user", "content": "hi"}]})
}

/// Twenty calls of 390 + 8 tokens ($0.0398) fit in [`BUDGET`], with 40 tokens to spare.
const TWENTIETH: u64 = 390;

/// Twenty calls of $0.0398 run for 1.5 s; meanwhile `meddle` happens; then more calls come.
/// The twenty stay counted whatever `meddle` did to the counters: returns what the key spent
/// and how many later calls passed.
async fn calls_survive(
    nodes: &Cluster,
    name: &str,
    meddle: impl std::future::Future<Output = ()>,
) -> (f64, usize) {
    let user = nodes.a.new_user(name).await;
    calls_survive_as(nodes, &user.token, meddle).await
}

/// [`calls_survive`] with a key of the user of `token`.
async fn calls_survive_as(
    nodes: &Cluster,
    token: &str,
    meddle: impl std::future::Future<Output = ()>,
) -> (f64, usize) {
    let (_, key) = key_for(&nodes.a, token, BUDGET).await;
    let (a, b) = (&nodes.a, &nodes.b);
    let slow = slow_call(1500, TWENTIETH);
    let running = fire([a, b], &key, &slow, 20);
    let later = async {
        // The running calls (1.5 s each) are written as calls in flight within a flush
        // interval (20 ms), long before they end.
        let rows = || async {
            let rows = in_flight_rows(&nodes.a).await;
            if rows == 20 {
                Ok(())
            } else {
                Err(rows)
            }
        };
        eventually("the running calls are in the database", Duration::from_millis(1000), rows)
            .await;
        meddle.await;
        fire([a, b], &key, &slow_call(0, TWENTIETH), 20).await
    };
    let (first, second) = tokio::join!(running, later);
    assert_eq!(first, 20, "twenty calls of $0.0398 fit in $0.80");
    let spent = spent(&nodes.a, token, first + second).await;
    // Once recorded, the calls leave the database's calls in flight.
    let none_left = || async {
        match in_flight_rows(&nodes.a).await {
            0 => Ok(()),
            left => Err(left),
        }
    };
    eventually(
        "no calls in flight left after they were recorded",
        Duration::from_secs(5),
        none_left,
    )
    .await;
    (spent, second)
}

/// Rows of `calls_in_flight` in the database of `app` (every node's).
async fn in_flight_rows(app: &TestApp) -> i64 {
    use aigw_persistence::pool::{DatabaseUrl, Pool, PoolOptions};
    use diesel::{QueryDsl, RunQueryDsl};
    let url = DatabaseUrl::parse(&app.database_url).unwrap();
    tokio::task::spawn_blocking(move || {
        let mut conn =
            Pool::new(&url, &PoolOptions::default()).unwrap().dedicated_connection().unwrap();
        aigw_persistence::schema::calls_in_flight::table.count().get_result(&mut conn).unwrap()
    })
    .await
    .unwrap()
}

/// A PATCH of `max_budget_usd` from $0.80 to $0.84 while 20 calls run: one more call fits
/// (it used to be 21: the PATCH dropped the counter and reopened it from the ledger, and the
/// key spent $1.64).
async fn a_patch_while_calls_run_keeps_them_counted(backend: Backend) {
    for redis in [false, true] {
        let server = if redis { RedisServer::start() } else { None };
        if redis && server.is_none() {
            return; // said loudly by RedisServer::start (and a failure under CI)
        }
        let counters = server.as_ref().map(RedisCounters::new);
        let nodes = cluster(backend, counters.as_ref()).await;
        let owner = nodes.a.new_user("patch-owner").await;
        let patch = async {
            let list = nodes.a.list_keys(Auth::Bearer(&owner.token)).await.data(200);
            let id = list["api_keys"][0]["id"].as_str().unwrap().to_owned();
            let raised = json!({"max_budget_usd": 0.84});
            nodes.a.patch_key(Auth::Bearer(&owner.token), &id, &raised).await.data(200);
        };
        let (spent, later) = calls_survive_as(&nodes, &owner.token, patch).await;
        assert!(later <= 1, "{later} calls passed after the PATCH (redis: {redis})");
        assert_within_budget(spent, 0.84, &format!("PATCH while calls run (redis: {redis})"));
        drop(nodes);
    }
}

/// Redis restarted (empty: it keeps nothing on disk) while 20 calls run: the counter reopens
/// from the ledger plus the calls in flight, so no more than the budget is spent (it used to
/// be twice the budget).
async fn a_redis_restart_while_calls_run_keeps_them_counted(backend: Backend) {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let counters = RedisCounters::new(&server);
    let nodes = cluster(backend, Some(&counters)).await;
    let server = std::sync::Mutex::new(&mut server);
    let restart = async {
        server.lock().unwrap().restart();
    };
    let (spent, later) = calls_survive(&nodes, "redis-restart", restart).await;
    assert_eq!(later, 0, "the 40 micro-USD left fit no call");
    assert_within_budget(spent, BUDGET, "Redis restarted while calls run");
}

/// `max_tokens` of 2^63 − 1 and other out-of-range caps answer 400 naming the field, with a
/// budget in the database counters (the reservation used to overflow into a 503).
async fn out_of_range_caps_are_refused_naming_the_field(backend: Backend) {
    let nodes = cluster(backend, None).await;
    let (_, _, key) = budget_key(&nodes.a, "caps").await;
    let message = json!([{"role": "user", "content": "hi"}]);
    for (field, value) in [
        ("max_tokens", json!(i64::MAX)),
        ("max_tokens", json!(-1)),
        ("max_completion_tokens", json!(1_048_577)),
        ("max_completion_tokens", json!("7")),
        ("n", json!(0)),
        ("n", json!(129)),
        ("n", json!(u64::MAX)),
    ] {
        let mut body = json!({"model": "up-bill", "messages": message});
        body[field] = value.clone();
        let reply = nodes.a.chat(Auth::Bearer(&key), &body).await;
        let error = reply.error(400, "invalid_request");
        assert_eq!(error["details"]["field"], json!(field), "{field} = {value}: {}", reply.text);
    }
}

/// 200 calls at once over two nodes on a budget for exactly 100 of them (each billed its
/// worst case: 8 prompt tokens and 1 000 completion tokens): at least 95 pass on the first
/// try, and never more than 100.
async fn a_burst_admits_what_fits(backend: Backend) {
    for redis in [false, true] {
        let server = if redis { RedisServer::start() } else { None };
        if redis && server.is_none() {
            return;
        }
        let counters = server.as_ref().map(RedisCounters::new);
        let nodes = cluster(backend, counters.as_ref()).await;
        let budget = 100.0 * 1008.0 * USD_PER_MILLION / 1_000_000.0;
        let (token, _, key) = budget_key_of(&nodes.a, "burst", budget).await;
        let key = key.as_str();
        let ok = fire([&nodes.a, &nodes.b], key, &slow_call(300, 1000), 200).await;
        eprintln!("burst: {ok} of 200 admitted on a budget for 100 (redis: {redis})");
        assert!(
            (95..=100).contains(&ok),
            "{ok} of 200 admitted on a budget for 100 (redis: {redis})"
        );
        assert_within_budget(spent(&nodes.a, &token, ok).await, budget, "burst");
    }
}

/// A prompt of `bytes` bytes or so that a BPE tokenizer makes about a sixth as many tokens of
/// (a common two-word phrase, repeated).
fn repetitive_prompt(bytes: usize) -> String {
    "hello world ".repeat(bytes / 12)
}

/// The requests of model `model` the upstream received.
fn received(nodes: &Cluster, model: &str) -> Vec<Value> {
    let bodies = nodes.upstream.requests().into_iter();
    bodies
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter(|body| body["model"] == json!(model))
        .collect()
}

/// One call whose prompt is twice the budget in bytes but a third of it in the tokenizer's
/// count, on a model that declares no tokenizer (its upstream bills a token per byte), with
/// `max_tokens: 1`: refused before the upstream, since its prompt counts a token per byte.
async fn one_large_prompt_cannot_pass_the_budget_of_a_model_without_a_declared_tokenizer(
    backend: Backend,
) {
    let nodes = cluster(backend, None).await;
    let (token, _, key) = budget_key(&nodes.a, "large-prompt").await;
    let body = json!({"model": "up-bytes", "max_tokens": 1,
                      "messages": [{"role": "user", "content": repetitive_prompt(16_800)}]});
    let bytes = serde_json::to_vec(&body).unwrap().len() as f64;
    assert!(bytes * USD_PER_MILLION / 1e6 > 2.0 * BUDGET, "billed twice the budget");
    for node in [&nodes.a, &nodes.b] {
        let reply = node.chat(Auth::Bearer(&key), &body).await;
        let error = reply.error(429, "budget_exceeded");
        assert!(error["details"]["reserved_usd"].as_f64().unwrap() > BUDGET, "{error}");
    }
    assert!(received(&nodes, "up-bytes").is_empty(), "the upstream received the call");
    // A call that fits still passes, and its reservation settles to what it was billed.
    let small = json!({"model": "up-bytes", "max_tokens": 1,
                       "messages": [{"role": "user", "content": repetitive_prompt(1_200)}]});
    let reply = nodes.a.chat(Auth::Bearer(&key), &small).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_within_budget(spent(&nodes.a, &token, 1).await, BUDGET, "a call that fits");
}

/// The same prompt's bytes count in `budget_mode = "clamp"`: a call whose prompt fits but not
/// its completion cap is sent with `max_tokens` lowered to what the budget has left after a
/// token per byte of its body (the body the lowering makes, which holds a `max_tokens` the
/// caller's may not), and is billed within the budget.
async fn a_clamped_call_of_a_model_without_a_declared_tokenizer_stays_within_the_budget(
    backend: Backend,
) {
    let nodes = cluster(backend, None).await;
    // About 4 800 bytes of prompt (some 800 tokens to a tokenizer) and 5 000 completion tokens,
    // or the 4 096 assumed without a cap: 9 800 or 8 900 tokens billed, in a budget of 8 000.
    let prompt = json!([{"role": "user", "content": repetitive_prompt(4_800)}]);
    let capped = json!({"model": "up-bytes", "max_tokens": 5000, "messages": prompt});
    let uncapped = json!({"model": "up-bytes", "messages": prompt});
    for (i, body) in [capped, uncapped].iter().enumerate() {
        let user = nodes.a.new_user("clamp-bytes").await;
        let made = nodes
            .a
            .create_key_raw(
                Auth::Bearer(&user.token),
                &json!({"name": "c", "permissions": ["ai_gateway", "read"],
                        "max_budget_usd": BUDGET, "budget_mode": "clamp"}),
            )
            .await
            .data(201);
        let key = made["key"].as_str().unwrap();
        let reply = nodes.a.chat(Auth::Bearer(key), body).await;
        assert_eq!(reply.status, 200, "case {i}: {}", reply.text);
        let sent = received(&nodes, "up-bytes");
        assert_eq!(sent.len(), i + 1);
        let lowered = sent[i]["max_tokens"].as_u64().unwrap();
        assert!((2_500..3_300).contains(&lowered), "max_tokens lowered to {lowered}");
        assert_within_budget(spent(&nodes.a, &user.token, 1).await, BUDGET, "clamped");
        // Nothing is left for another such call: refused, not sent.
        let again = nodes.a.chat(Auth::Bearer(key), body).await;
        again.error(429, "budget_exceeded");
        assert_eq!(received(&nodes, "up-bytes").len(), i + 1);
    }
}

/// 200 calls at once over two nodes, each billed a token per byte of its body (about 1 300
/// tokens, some 230 to a tokenizer) on a budget worth 20 of them, with the counters in the
/// database and in Redis: at most the budget is spent.
async fn concurrent_calls_billed_a_token_per_byte_spend_at_most_the_budget(backend: Backend) {
    for redis in [false, true] {
        let server = if redis { RedisServer::start() } else { None };
        if redis && server.is_none() {
            return; // said loudly by RedisServer::start (and a failure under CI)
        }
        let counters = server.as_ref().map(RedisCounters::new);
        let nodes = cluster(backend, counters.as_ref()).await;
        let body = json!({"model": "up-bytes", "max_tokens": 16,
                          "messages": [{"role": "user", "content": repetitive_prompt(1_200)}]});
        let billed = serde_json::to_vec(&body).unwrap().len() as f64 + 16.0;
        let budget = 20.0 * billed * USD_PER_MILLION / 1_000_000.0;
        let (token, _, key) = budget_key_of(&nodes.a, "bytes-burst", budget).await;
        let ok = fire([&nodes.a, &nodes.b], &key, &body, 200).await;
        eprintln!("{ok} of 200 calls billed a token per byte admitted on a budget for 20 (redis: {redis})");
        assert!((15..=20).contains(&ok), "{ok} calls admitted on a budget for 20 (redis: {redis})");
        let spent = spent(&nodes.a, &token, ok).await;
        assert_within_budget(spent, budget, &format!("a token per byte (redis: {redis})"));
    }
}
