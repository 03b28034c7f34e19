//! Hard budgets: worst-case reservations that hold under concurrency, on one node and
//! on two nodes sharing the database; the 429 `budget_exceeded` answer; settlement of JSON
//! answers and of streams. And a key's own `rpm_limit` / `tpm_limit` across nodes, with
//! OpenAI's `x-ratelimit-*` headers (the test apps run with `rate_limit.enabled = false`: a
//! key's limits hold regardless).

use crate::common;

use aigw_service::{PriceConfig, ProviderConfig, ProviderKind};
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

backend_tests!(
    fifty_concurrent_calls_spend_at_most_the_budget,
    fifty_concurrent_calls_on_two_nodes_spend_at_most_the_budget,
    an_exhausted_budget_answers_429_with_details_and_retry_after,
    answers_and_streams_settle_to_their_real_cost,
    patching_the_budget_takes_effect_at_once,
    rpm_limit_holds_across_nodes_with_openai_headers,
    tpm_limit_reserves_worst_case_tokens_and_settles,
    node_counters_hold_fifty_concurrent_calls_to_the_budget,
    node_counters_open_from_the_ledger_and_follow_patches,
    node_counters_hold_rpm_and_tpm_limits,
    the_rate_window_is_a_minute_of_the_settings_clock,
    database_counters_admit_at_a_bound_far_from_the_limits,
    node_counters_admit_at_a_bound_far_from_the_limits,
);

/// USD per million prompt tokens of `priced` (completions are free, so a call's worst case,
/// its prompt, is exactly its real cost).
pub(crate) const INPUT_PER_MILLION: f64 = 100.0;

/// Providers: `priced` (prompt tokens cost [`INPUT_PER_MILLION`]) and `dear` (also
/// completion tokens, at 1000 USD per million), both answered by the built-in echo.
pub(crate) fn priced_providers(s: &mut aigw_http::settings::Settings) {
    let price = |input: f64, output: f64| PriceConfig {
        input_per_million: input,
        output_per_million: output,
        image_tokens: None,
        ..PriceConfig::default()
    };
    s.providers = vec![ProviderConfig {
        name: "local".into(),
        kind: ProviderKind::Echo,
        base_url: None,
        api_key: None,
        models: vec!["priced".into(), "dear".into()],
        tokenizers: Default::default(),
        prices: BTreeMap::from([
            ("priced".to_owned(), price(INPUT_PER_MILLION, 0.0)),
            ("dear".to_owned(), price(INPUT_PER_MILLION, 1000.0)),
        ]),
        ..ProviderConfig::default()
    }];
    s.usage.flush_interval_ms = 20;
}

/// The cost of one `priced` call with `chat_body("priced", "hi")`, in USD, read from the
/// echo's own `usage` (the same tokenizer count the reservation uses).
pub(crate) async fn cost_of_one_call(app: &TestApp, token: &str) -> f64 {
    let probe = app.key(token, &["ai_gateway"]).await;
    let reply = app.chat(Auth::Bearer(&probe), &chat_body("priced", "hi")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let prompt = reply.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 0);
    prompt as f64 * INPUT_PER_MILLION / 1_000_000.0
}

pub(crate) async fn budget_key(app: &TestApp, token: &str, usd: f64, period: &str) -> Value {
    app.create_key_raw(
        Auth::Bearer(token),
        &json!({"name": "budget", "permissions": ["ai_gateway", "read"],
                "max_budget_usd": usd, "budget_period": period}),
    )
    .await
    .data(201)
}

/// Fires `n` calls at once, spread over `nodes`; returns how many got 200 and how many 429
/// `budget_exceeded` (any other answer fails the test).
pub(crate) async fn fire(nodes: &[&TestApp], key: &str, n: usize) -> (usize, usize) {
    let calls = (0..n).map(|i| {
        let node = nodes[i % nodes.len()];
        let request = node
            .request(reqwest::Method::POST, "/api/v1/ai/chat/completions", Auth::Bearer(key))
            .json(&chat_body("priced", "hi"));
        async move { node.send(request).await }
    });
    let replies = futures_util::future::join_all(calls).await;
    let (mut ok, mut refused) = (0, 0);
    for reply in replies {
        match reply.status {
            200 => ok += 1,
            429 => {
                reply.error(429, "budget_exceeded");
                refused += 1;
            }
            other => panic!("unexpected {other}: {}", reply.text),
        }
    }
    (ok, refused)
}

/// [`priced_providers`] with the counters in the node's memory (`gateway.key_counters =
/// "node"`, one node per database).
fn node_counters(s: &mut aigw_http::settings::Settings) {
    priced_providers(s);
    s.gateway.key_counters = aigw_service::governance::key_counters::KeyCounters::Node;
}

async fn fifty_concurrent_calls_spend_at_most_the_budget(backend: Backend) {
    fifty_concurrent_calls_on_one_node(backend, priced_providers).await;
}

async fn node_counters_hold_fifty_concurrent_calls_to_the_budget(backend: Backend) {
    fifty_concurrent_calls_on_one_node(backend, node_counters).await;
}

/// 50 concurrent calls of a key whose daily budget allows 10, spread over `nodes` (the first
/// one the app); returns the cost of one call in USD.
pub(crate) async fn fifty_concurrent_calls(nodes: &[&TestApp]) -> f64 {
    let app = nodes[0];
    let user = app.new_user("budget50").await;
    let cost = cost_of_one_call(app, &user.token).await;
    let made = budget_key(app, &user.token, 10.0 * cost, "daily").await;
    let (ok, refused) = fire(nodes, made["key"].as_str().unwrap(), 50).await;
    assert_eq!(ok, 10, "a budget for 10 calls let {ok} through on {} node(s)", nodes.len());
    assert_eq!(refused, 40);
    cost
}

async fn fifty_concurrent_calls_on_one_node(
    backend: Backend,
    tweak: fn(&mut aigw_http::settings::Settings),
) {
    let app = spawn_app_with(backend, tweak).await;
    fifty_concurrent_calls(&[&app]).await;
}

async fn fifty_concurrent_calls_on_two_nodes_spend_at_most_the_budget(backend: Backend) {
    let app = spawn_app_with(backend, priced_providers).await;
    let node_b = app.spawn_sibling(priced_providers).await;
    fifty_concurrent_calls(&[&app, &node_b]).await;
}

async fn an_exhausted_budget_answers_429_with_details_and_retry_after(backend: Backend) {
    let app = spawn_app_with(backend, priced_providers).await;
    let user = app.new_user("budget429").await;
    let cost = cost_of_one_call(&app, &user.token).await;
    let made = budget_key(&app, &user.token, cost, "daily").await;
    let key = made["key"].as_str().unwrap();
    let first = app.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let refused = app.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
    let error = refused.error(429, "budget_exceeded");
    let details = &error["details"];
    assert!((details["limit_usd"].as_f64().unwrap() - cost).abs() < 1e-9, "{error}");
    assert!((details["spent_usd"].as_f64().unwrap() - cost).abs() < 1e-9, "{error}");
    // `reset`: the next UTC midnight, and Retry-After the seconds until then.
    let now = chrono::Utc::now();
    let midnight = (now.date_naive() + chrono::Days::new(1)).and_hms_opt(0, 0, 0).unwrap();
    assert_eq!(details["reset"], json!(midnight.and_utc().timestamp()), "{error}");
    let retry: i64 = refused.header("retry-after").unwrap().parse().unwrap();
    let expected = midnight.and_utc().timestamp() - now.timestamp();
    assert!((retry - expected).abs() <= 2, "Retry-After {retry}, expected about {expected}");
    // A `total` budget never resets: no `reset`, still a Retry-After.
    let total = budget_key(&app, &user.token, 0.0, "total").await;
    let refused =
        app.chat(Auth::Bearer(total["key"].as_str().unwrap()), &chat_body("priced", "hi")).await;
    let error = refused.error(429, "budget_exceeded");
    assert!(error["details"].get("reset").is_none(), "{error}");
    assert_eq!(error["details"]["limit_usd"], json!(0.0));
    assert!(refused.header("retry-after").is_some());
    // The key's spend shows in its key object once the ledger has it.
    let id = made["id"].as_str().unwrap();
    let shown = || async {
        let spent = key_spend(&app, &user.token, id).await;
        if (spent - cost).abs() < 1e-9 {
            Ok(())
        } else {
            Err(spent)
        }
    };
    eventually(&format!("spend_usd never became {cost}"), Duration::from_secs(5), shown).await;
}

/// Key `id`'s `spend_usd` as its owner (`token`) lists it.
async fn key_spend(app: &TestApp, token: &str, id: &str) -> f64 {
    let list = app.list_keys(Auth::Bearer(token)).await.data(200);
    list["api_keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == json!(id))
        .map(|k| k["spend_usd"].as_f64().unwrap())
        .unwrap()
}

async fn answers_and_streams_settle_to_their_real_cost(backend: Backend) {
    let app = spawn_app_with(backend, priced_providers).await;
    let user = app.new_user("settle").await;
    // `dear` reserves its prompt plus 1000 completion tokens at 1000 USD per million (1 USD);
    // the echo answers "hi" in a token or two. A budget of 1.5 USD fits one worst case at a
    // time, and many real calls once each settles.
    let made = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "s", "permissions": ["ai_gateway"], "max_budget_usd": 1.5,
                    "budget_period": "weekly"}),
        )
        .await
        .data(201);
    let key = made["key"].as_str().unwrap();
    let mut body = chat_body("dear", "hi");
    body["max_tokens"] = json!(1000);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    for (round, request) in [&body, &streamed, &body, &streamed].into_iter().enumerate() {
        // Each call waits for the previous one's settlement (asynchronous, after the answer).
        let passed = || async {
            let reply = app.chat(Auth::Bearer(key), request).await;
            if reply.status == 200 {
                return Ok(reply);
            }
            reply.error(429, "budget_exceeded");
            Err(reply.status)
        };
        let what = format!("call {round} never passed: no settlement");
        let reply = eventually(&what, Duration::from_secs(5), passed).await;
        if request["stream"] == json!(true) {
            assert!(reply.text.contains("data: [DONE]"), "{}", reply.text);
        }
    }
    // Without max_tokens the worst case is the default cap (4096 tokens, 4 USD): refused.
    let reply = app.chat(Auth::Bearer(key), &chat_body("dear", "hi")).await;
    reply.error(429, "budget_exceeded");
}

async fn patching_the_budget_takes_effect_at_once(backend: Backend) {
    let app = spawn_app_with(backend, priced_providers).await;
    let node_b = app.spawn_sibling(priced_providers).await;
    let user = app.new_user("budgetpatch").await;
    let made = budget_key(&app, &user.token, 0.0, "daily").await;
    let (id, key) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    node_b.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await.error(429, "budget_exceeded");
    app.patch_key(Auth::Bearer(&user.token), id, &json!({"max_budget_usd": 100})).await.data(200);
    let reply = node_b.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    app.patch_key(Auth::Bearer(&user.token), id, &json!({"max_budget_usd": null})).await.data(200);
    let reply = node_b.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

/// Two nodes on one database started with `tweak`, both reading the returned adjustable clock
/// (the limits' rate windows and budget periods are read from it).
pub(crate) async fn two_nodes_on_one_clock(
    backend: Backend,
    tweak: &(dyn Fn(&mut aigw_http::settings::Settings) + Sync),
) -> (TestApp, TestApp, aigw_service::Clock) {
    let clock = aigw_service::Clock::adjustable();
    let timed = |s: &mut aigw_http::settings::Settings| {
        tweak(s);
        s.clock = clock.clone();
    };
    let app = spawn_app_with(backend, timed).await;
    let node_b = app.spawn_sibling(timed).await;
    (app, node_b, clock)
}

/// Moves `clock` (the adjustable clock every node of the test reads) to the start of the next
/// UTC minute when fewer than 15 s are left in the current one (the keys' rate windows are
/// minutes of that clock), so that a test's calls fall into one window without waiting.
pub(crate) fn early_in_a_minute(clock: &aigw_service::Clock) {
    let second = clock.now().timestamp().rem_euclid(60);
    if second > 45 {
        advance(clock, (60 - second) * 1000);
    }
}

pub(crate) fn header_i64(reply: &Reply, name: &str) -> i64 {
    reply.header(name).unwrap_or_else(|| panic!("no {name}: {:?}", reply.headers)).parse().unwrap()
}

async fn rpm_limit_holds_across_nodes_with_openai_headers(backend: Backend) {
    rpm_limit_across_two_nodes(backend, &priced_providers).await;
}

/// A key with `rpm_limit` 4 gets 4 calls, alternating between two nodes started with
/// `tweak`, then 429 on both; returns the first node and the key's id.
pub(crate) async fn rpm_limit_across_two_nodes(
    backend: Backend,
    tweak: &(dyn Fn(&mut aigw_http::settings::Settings) + Sync),
) -> (TestApp, String) {
    let (app, node_b, clock) = two_nodes_on_one_clock(backend, tweak).await;
    let user = app.new_user("rpm").await;
    let made = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "rpm", "permissions": ["ai_gateway"], "rpm_limit": 4}),
        )
        .await
        .data(201);
    let key = made["key"].as_str().unwrap();
    early_in_a_minute(&clock);
    for (i, node) in [&app, &node_b, &app, &node_b].into_iter().enumerate() {
        let reply = node.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(header_i64(&reply, "x-ratelimit-limit-requests"), 4);
        assert_eq!(header_i64(&reply, "x-ratelimit-remaining-requests"), 3 - i as i64);
        let reset = reply.header("x-ratelimit-reset-requests").unwrap();
        let secs: i64 = reset.strip_suffix('s').unwrap().parse().unwrap();
        assert!((1..=60).contains(&secs), "reset {reset}");
        // No token limit: no token headers.
        assert!(reply.header("x-ratelimit-limit-tokens").is_none());
    }
    for node in [&app, &node_b] {
        let refused = node.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
        let error = refused.error(429, "rate_limit_exceeded");
        assert_eq!(error["details"]["limit"], json!(4), "{error}");
        assert_eq!(error["details"]["remaining"], json!(0), "{error}");
        let reset = error["details"]["reset"].as_i64().unwrap();
        assert_eq!(reset % 60, 0, "reset is the end of the minute: {error}");
        assert!(refused.header("retry-after").is_some());
    }
    // A key without limits carries no x-ratelimit headers.
    let open = app.key(&user.token, &["ai_gateway"]).await;
    let reply = app.chat(Auth::Bearer(&open), &chat_body("priced", "hi")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.header("x-ratelimit-limit-requests").is_none());
    let id = made["id"].as_str().unwrap().to_owned();
    (app, id)
}

async fn tpm_limit_reserves_worst_case_tokens_and_settles(backend: Backend) {
    tpm_limit_on_one_node(backend, priced_providers).await;
}

async fn node_counters_hold_rpm_and_tpm_limits(backend: Backend) {
    tpm_limit_on_one_node(backend, node_counters).await;
    let (app, clock) = spawn_app_with_clock(backend, node_counters).await;
    let user = app.new_user("noderpm").await;
    let made = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "rpm", "permissions": ["ai_gateway"], "rpm_limit": 3}),
        )
        .await
        .data(201);
    let key = made["key"].as_str().unwrap();
    early_in_a_minute(&clock);
    for i in 0..3 {
        let reply = app.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(header_i64(&reply, "x-ratelimit-remaining-requests"), 2 - i);
    }
    let refused = app.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
    let error = refused.error(429, "rate_limit_exceeded");
    assert_eq!(error["details"]["limit"], json!(3), "{error}");
    assert!(refused.header("retry-after").is_some());
}

/// A key's rate window is a minute of the settings' clock, not of the system time: moved a
/// minute on, the clock opens a new window, and a key refused by its `rpm_limit` is admitted
/// again at once.
async fn the_rate_window_is_a_minute_of_the_settings_clock(backend: Backend) {
    let (app, clock) = spawn_app_with_clock(backend, priced_providers).await;
    let user = app.new_user("rpmclock").await;
    let made = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "rpm", "permissions": ["ai_gateway"], "rpm_limit": 1}),
        )
        .await
        .data(201);
    let key = made["key"].as_str().unwrap();
    early_in_a_minute(&clock);
    let first = app.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let refused = app.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
    refused.error(429, "rate_limit_exceeded");
    advance(&clock, 60_000);
    let next_minute = app.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
    assert_eq!(next_minute.status, 200, "{}", next_minute.text);
    assert_eq!(header_i64(&next_minute, "x-ratelimit-remaining-requests"), 0);
}

async fn tpm_limit_on_one_node(backend: Backend, tweak: fn(&mut aigw_http::settings::Settings)) {
    let (app, clock) = spawn_app_with_clock(backend, tweak).await;
    let user = app.new_user("tpm").await;
    // The prompt's tokens, as the echo (and the reservation) count them.
    let probe = app.key(&user.token, &["ai_gateway"]).await;
    let reply = app.chat(Auth::Bearer(&probe), &chat_body("priced", "hi")).await;
    let prompt = reply.json()["usage"]["prompt_tokens"].as_i64().unwrap();
    let tpm = prompt + 40;
    let made = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "tpm", "permissions": ["ai_gateway"], "tpm_limit": tpm}),
        )
        .await
        .data(201);
    let key = made["key"].as_str().unwrap();
    let mut big = chat_body("priced", "hi");
    big["max_tokens"] = json!(35);
    early_in_a_minute(&clock);
    let first = app.chat(Auth::Bearer(key), &big).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(header_i64(&first, "x-ratelimit-limit-tokens"), tpm);
    assert_eq!(header_i64(&first, "x-ratelimit-remaining-tokens"), tpm - prompt - 35);
    assert!(first.header("x-ratelimit-limit-requests").is_none());
    // The same worst case again does not fit, settled or not (the first used a few tokens).
    let refused = app.chat(Auth::Bearer(key), &big).await;
    let error = refused.error(429, "rate_limit_exceeded");
    assert_eq!(error["details"]["limit"], json!(tpm), "{error}");
    // A smaller call fits once the first has settled to its real tokens.
    let mut small = chat_body("priced", "hi");
    small["max_tokens"] = json!(20);
    let fits = || async {
        let reply = app.chat(Auth::Bearer(key), &small).await;
        if reply.status == 200 {
            return Ok(());
        }
        reply.error(429, "rate_limit_exceeded");
        Err(reply.status)
    };
    eventually("the first call never settled", Duration::from_secs(5), fits).await;
}

/// Waits until key `id`'s `spend_usd` (from the ledger) reaches `usd`.
pub(crate) async fn wait_for_spend(app: &TestApp, token: &str, id: &str, usd: f64) {
    let reached = || async {
        let spent = key_spend(app, token, id).await;
        if spent >= usd - 1e-9 {
            Ok(())
        } else {
            Err(spent)
        }
    };
    eventually(&format!("spend_usd never reached {usd}"), Duration::from_secs(5), reached).await;
}

async fn node_counters_open_from_the_ledger_and_follow_patches(backend: Backend) {
    let app = spawn_app_with(backend, node_counters).await;
    let user = app.new_user("nodeledger").await;
    let cost = cost_of_one_call(&app, &user.token).await;
    let made = budget_key(&app, &user.token, 2.0 * cost, "monthly").await;
    let (id, key) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    let (ok, refused) = fire(&[&app], key, 3).await;
    assert_eq!((ok, refused), (2, 1));
    wait_for_spend(&app, &user.token, id, 2.0 * cost).await;
    // A node started later (a restart: empty memory) opens the counter from the ledger.
    let restarted = app.spawn_sibling(node_counters).await;
    let reply = restarted.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
    reply.error(429, "budget_exceeded");
    // A PATCH of the budget takes effect at once, reopened from the ledger (2 calls spent).
    app.patch_key(Auth::Bearer(&user.token), id, &json!({"max_budget_usd": 3.0 * cost}))
        .await
        .data(200);
    let (ok, refused) = fire(&[&restarted], key, 3).await;
    assert_eq!((ok, refused), (1, 2), "3 calls' budget with 2 spent");
    // So does a new period kind (today's ledger: 3 calls), and no budget at all.
    wait_for_spend(&app, &user.token, id, 3.0 * cost).await;
    app.patch_key(Auth::Bearer(&user.token), id, &json!({"budget_period": "daily"}))
        .await
        .data(200);
    restarted
        .chat(Auth::Bearer(key), &chat_body("priced", "hi"))
        .await
        .error(429, "budget_exceeded");
    app.patch_key(Auth::Bearer(&user.token), id, &json!({"max_budget_usd": null})).await.data(200);
    let reply = restarted.chat(Auth::Bearer(key), &chat_body("priced", "hi")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

/// One call of a new key with `tpm_limit` `tpm` and a budget of 1000 calls, on `app`: asserts
/// the tokens it held while running (`x-ratelimit-remaining-tokens`), and that it settles to
/// its real cost. Returns the key's id. The prompt ("hi" from "user") counts 8 tokens; its
/// upper bound (one token per byte of the message's JSON) 3 + 3 + 1 +
/// bytes(`{"content":"hi","role":"user"}`) = 37.
pub(crate) async fn one_call_holding(app: &TestApp, token: &str, tpm: i64, held: i64) -> String {
    let cost = cost_of_one_call(app, token).await;
    let made = app
        .create_key_raw(
            Auth::Bearer(token),
            &json!({"name": "bound", "permissions": ["ai_gateway", "read"],
                    "tpm_limit": tpm, "max_budget_usd": 1000.0 * cost}),
        )
        .await
        .data(201);
    let (id, key) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    let mut body = chat_body("priced", "hi");
    body["max_tokens"] = json!(BOUND_TEST_CAP);
    let reply = app.chat(Auth::Bearer(key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["usage"]["prompt_tokens"], json!(BOUND_TEST_EXACT));
    assert_eq!(header_i64(&reply, "x-ratelimit-remaining-tokens"), tpm - held, "tpm {tpm}");
    wait_for_spend(app, token, id, cost).await;
    id.to_owned()
}

/// The prompt tokens of `chat_body("priced", "hi")`, its upper bound (7 fixed tokens and the
/// 80 bytes of the body that [`one_call_holding`] sends), and that body's `max_tokens`.
pub(crate) const BOUND_TEST_EXACT: i64 = 8;
pub(crate) const BOUND_TEST_BOUND: i64 = 87;
pub(crate) const BOUND_TEST_CAP: i64 = 4096;

/// Far from its limits a call is held at the upper bound of its prompt (no tokenizer); close
/// to them (room for fewer than 32 more such calls) at the tokenizer's count.
async fn bound_far_from_the_limits(
    backend: Backend,
    tweak: fn(&mut aigw_http::settings::Settings),
) {
    let (app, clock) = spawn_app_with_clock(backend, tweak).await;
    let user = app.new_user("bound").await;
    let (exact, bound) = (BOUND_TEST_EXACT + BOUND_TEST_CAP, BOUND_TEST_BOUND + BOUND_TEST_CAP);
    early_in_a_minute(&clock);
    one_call_holding(&app, &user.token, 1_000_000_000, bound).await;
    one_call_holding(&app, &user.token, 3 * exact, exact).await;
}

async fn database_counters_admit_at_a_bound_far_from_the_limits(backend: Backend) {
    bound_far_from_the_limits(backend, priced_providers).await;
}

async fn node_counters_admit_at_a_bound_far_from_the_limits(backend: Backend) {
    bound_far_from_the_limits(backend, node_counters).await;
}
