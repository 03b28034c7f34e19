//! `POST /api/v1/ai/anthropic/v1/messages` and `/v1/messages/count_tokens` (Anthropic's
//! Messages API), black box on both backends against the fake upstream's `/v1/messages`
//! (`common::upstream_messages`, which bills a token per byte of the body, a quarter of it
//! written to the cache and a quarter read from it, and `max_tokens`): the body and the
//! stream's bytes passed through; the caller's key in `x-api-key` in, the provider's out
//! (never the caller's); usage read from the message (a stream's `message_start` and
//! `message_delta`) and priced with the cache prices; an `error` event mid-stream metered as
//! `upstream_error`; token counts passed through unmetered; bad input refused naming the
//! field; every error in Anthropic's shape too; clamp mode lowers `max_tokens`; 200
//! concurrent calls over two nodes, plain and streamed, spend at most a budget worth 20.

use crate::common::gateway_calls::{cost_of, fire_at, records_of};
use crate::common::upstream::FakeUpstream;
use crate::common::upstream_messages::{billed_usage, stream_events, DELTAS, PROVIDER_KEY, TEXT};
use crate::common::*;
use aigw_http::settings::Settings;
use aigw_service::{PriceConfig, ProviderConfig, ProviderKind};
use serde_json::{json, Value};

backend_tests!(
    messages_are_passed_through_and_metered_at_cache_prices,
    token_counts_are_passed_through_unmetered,
    bad_messages_input_is_refused_naming_the_field,
    errors_carry_anthropics_shape,
    a_clamped_message_lowers_max_tokens,
    messages_budgets_hold_over_two_nodes_plain_and_streamed,
);

/// USD per million input and output tokens of the `claude-*` models; cache reads cost a
/// tenth, cache writes a quarter more.
const USD_PER_MILLION: f64 = 1000.0;

/// The messages endpoint.
const PATH: &str = "/api/v1/ai/anthropic/v1/messages";

/// The token-count endpoint.
const COUNT_PATH: &str = "/api/v1/ai/anthropic/v1/messages/count_tokens";

/// A node whose provider `ant` (kind `anthropic`, at `upstream`) serves the fake's
/// `claude-*` models, all priced, beside the built-in `echo` (chat only).
fn anthropic_provider(upstream: &str) -> impl Fn(&mut Settings) + '_ {
    move |s: &mut Settings| {
        let price = PriceConfig {
            input_per_million: USD_PER_MILLION,
            output_per_million: USD_PER_MILLION,
            cached_input_per_million: Some(USD_PER_MILLION / 10.0),
            cache_write_per_million: Some(USD_PER_MILLION * 1.25),
            ..PriceConfig::default()
        };
        let models = ["claude-bill", "claude-error", "claude-400", "claude-429", "claude-529"];
        s.providers = vec![ProviderConfig {
            name: "ant".into(),
            kind: ProviderKind::Anthropic,
            base_url: Some(upstream.to_owned()),
            api_key: Some(PROVIDER_KEY.to_owned().into()),
            models: models.iter().map(|m| (*m).to_owned()).collect(),
            prices: models.iter().map(|m| ((*m).to_owned(), price)).collect(),
            ..ProviderConfig::default()
        }];
        s.usage.flush_interval_ms = 20;
    }
}

/// The cost in USD of a call the fake billed `(uncached, written, read, output)`.
fn cost((uncached, written, read, output): (u64, u64, u64, u64)) -> f64 {
    let micros = uncached as f64 * USD_PER_MILLION
        + written as f64 * USD_PER_MILLION * 1.25
        + read as f64 * USD_PER_MILLION / 10.0
        + output as f64 * USD_PER_MILLION;
    micros / 1e6
}

/// Posts `body` to `path` of `app` with `key` in `x-api-key`, as Anthropic's SDKs send it,
/// with `headers` besides.
async fn post_x_api_key(
    app: &TestApp,
    path: &str,
    key: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Reply {
    let mut request = app.request(reqwest::Method::POST, path, Auth::None).header("x-api-key", key);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    app.send(request.json(body)).await
}

/// Posts a message `body` with `key` in `x-api-key`.
async fn message(app: &TestApp, key: &str, body: &Value) -> Reply {
    post_x_api_key(app, PATH, key, &[], body).await
}

fn hello(model: &str) -> Value {
    json!({"model": model, "max_tokens": 40, "messages": [{"role": "user", "content": "hi"}]})
}

async fn messages_are_passed_through_and_metered_at_cache_prices(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, anthropic_provider(&upstream.base_url)).await;
    let user = app.new_user("msg").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;

    let plain = json!({"model": "claude-bill", "max_tokens": 40, "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "say hello"}]}],
        "metadata": {"user_id": "u-1"}});
    let reply = message(&app, &key, &plain).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["content"][0]["text"], TEXT);
    let sent = upstream.requests().last().cloned().unwrap();
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], PROVIDER_KEY, "the provider's key upstream");
    assert!(!sent.headers.contains_key("authorization"), "{:?}", sent.headers);
    assert!(!format!("{:?}", sent.headers).contains(&key), "never the caller's key");
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01", "the default version");
    assert_eq!(serde_json::from_slice::<Value>(&sent.body).unwrap(), plain, "passed through");
    let plain_billed = billed_usage(&plain, sent.body.len() as u64);

    let streamed = json!({"model": "claude-bill", "max_tokens": 30, "stream": true,
        "messages": [{"role": "user", "content": "say hello"}]});
    let versioned = [("anthropic-version", "2024-10-22"), ("anthropic-beta", "tools-2024-05-16")];
    let reply = post_x_api_key(&app, PATH, &key, &versioned, &streamed).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.header("content-type").unwrap_or_default().starts_with("text/event-stream"));
    let sent = upstream.requests().last().cloned().unwrap();
    assert_eq!(sent.headers["anthropic-version"], "2024-10-22", "the caller's version");
    assert_eq!(sent.headers["anthropic-beta"], "tools-2024-05-16");
    assert_eq!(serde_json::from_slice::<Value>(&sent.body).unwrap(), streamed, "unchanged");
    let events = stream_events("claude-bill", &streamed, sent.body.len() as u64);
    assert_eq!(reply.text, events.concat(), "the stream's bytes passed through");
    let streamed_billed = billed_usage(&streamed, sent.body.len() as u64);

    let broken = json!({"model": "claude-error", "max_tokens": 30, "stream": true,
        "messages": [{"role": "user", "content": "x"}]});
    let reply = message(&app, &key, &broken).await;
    assert_eq!(reply.status, 200, "the head came before the error");
    assert!(reply.text.contains("event: error"), "{}", reply.text);
    let broken_len = upstream.requests().last().unwrap().body.len() as u64;

    let found = records_of(&app, &[&user], 3).await;
    let by_model = |model: &str, streamed: bool| {
        found
            .iter()
            .find(|r| r["model"] == model && r["streamed"] == streamed)
            .cloned()
            .unwrap_or_else(|| panic!("no record of {model}: {found:?}"))
    };
    for (record, billed) in [
        (by_model("claude-bill", false), plain_billed),
        (by_model("claude-bill", true), streamed_billed),
    ] {
        let prompt = billed.0 + billed.1 + billed.2;
        assert_eq!(record["prompt_tokens"].as_u64(), Some(prompt), "{record}");
        assert_eq!(record["completion_tokens"].as_u64(), Some(billed.3), "{record}");
        assert_eq!(record["estimated"], false, "{record}");
        assert_eq!(record["outcome"], "ok", "{record}");
        let recorded = record["cost_usd"].as_f64().unwrap();
        assert!((recorded - cost(billed)).abs() < 1e-6, "cache prices: {record}");
    }
    let cut = by_model("claude-error", true);
    assert_eq!(cut["outcome"], "upstream_error", "{cut}");
    let (uncached, written, read, _) = billed_usage(&broken, broken_len);
    assert_eq!(cut["prompt_tokens"].as_u64(), Some(uncached + written + read), "{cut}");
    let streamed_text = DELTAS[0].len().div_ceil(4) as u64;
    assert_eq!(cut["completion_tokens"].as_u64(), Some(streamed_text), "what was streamed: {cut}");
}

async fn token_counts_are_passed_through_unmetered(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, anthropic_provider(&upstream.base_url)).await;
    let user = app.new_user("msg-count").await;
    let key = app.key(&user.token, &["ai_gateway", "read"]).await;
    let body = json!({"model": "claude-bill", "messages": [{"role": "user", "content": "hi"}]});
    let reply = post_x_api_key(&app, COUNT_PATH, &key, &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let sent = upstream.requests().last().cloned().unwrap();
    assert_eq!(sent.path, "/v1/messages/count_tokens");
    assert_eq!(sent.headers["x-api-key"], PROVIDER_KEY);
    assert_eq!(reply.json(), json!({"input_tokens": sent.body.len()}));
    let bearer = app.post(COUNT_PATH, Auth::Bearer(&key), &body).await;
    assert_eq!(bearer.status, 200, "Authorization works too: {}", bearer.text);
    // A key whose budget is spent still counts tokens: the count is free.
    let spent = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "b", "permissions": ["ai_gateway"], "max_budget_usd": 0.000001}),
        )
        .await
        .data(201);
    let spent = spent["key"].as_str().unwrap().to_owned();
    let reply = post_x_api_key(&app, COUNT_PATH, &spent, &[], &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    post_x_api_key(&app, COUNT_PATH, &key, &[], &json!({"model": "claude-bill"}))
        .await
        .invalid("messages");
    post_x_api_key(
        &app,
        COUNT_PATH,
        &key,
        &[],
        &json!({"model": "echo", "messages": [
        {"role": "user", "content": "x"}]}),
    )
    .await
    .invalid("model");
    let chat = app.chat(Auth::Bearer(&key), &chat_body("echo", "hi")).await;
    assert_eq!(chat.status, 200, "{}", chat.text);
    records_of(&app, &[&user], 1).await;
}

async fn bad_messages_input_is_refused_naming_the_field(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, anthropic_provider(&upstream.base_url)).await;
    let user = app.new_user("msg-bad").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let user_says = json!([{"role": "user", "content": "x"}]);
    for (body, field) in [
        (json!({"model": "claude-bill", "messages": user_says}), "max_tokens"),
        (json!({"model": "claude-bill", "max_tokens": 0, "messages": user_says}), "max_tokens"),
        (json!({"max_tokens": 5, "messages": user_says}), "model"),
        (json!({"model": "claude-bill", "max_tokens": 5, "messages": []}), "messages"),
        (
            json!({"model": "claude-bill", "max_tokens": 5, "messages": [
                {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                {"role": "system", "content": "z"}]}),
            "messages[2].role",
        ),
        (
            json!({"model": "claude-bill", "max_tokens": 5, "messages": [
                {"role": "user", "content": [{"text": "x"}]}]}),
            "messages[0].content[0].type",
        ),
        (
            json!({"model": "claude-bill", "max_tokens": 5, "messages": user_says, "stream": 1}),
            "stream",
        ),
        (json!({"model": "echo", "max_tokens": 5, "messages": user_says}), "model"),
    ] {
        message(&app, &key, &body).await.invalid(field);
    }
    let not_chat = app.chat(Auth::Bearer(&key), &chat_body("claude-bill", "hi")).await;
    not_chat.invalid("model");
    assert!(upstream.requests().is_empty(), "nothing refused went upstream");
}

async fn errors_carry_anthropics_shape(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, anthropic_provider(&upstream.base_url)).await;
    let user = app.new_user("msg-err").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let anthropic = |reply: &Reply, status: u16, code: &str, kind: &str| {
        let error = reply.error(status, code);
        assert_eq!(reply.json()["type"], "error", "{}", reply.text);
        assert_eq!(error["type"], kind, "{}", reply.text);
        error
    };
    let none = app.post(PATH, Auth::None, &hello("claude-bill")).await;
    anthropic(&none, 401, "unauthorized", "authentication_error");
    none.unauthorized();
    let bad = message(&app, "aigw_not_a_key", &hello("claude-bill")).await;
    anthropic(&bad, 401, "unauthorized", "authentication_error");
    let counted = post_x_api_key(&app, COUNT_PATH, "aigw_nope", &[], &json!({})).await;
    anthropic(&counted, 401, "unauthorized", "authentication_error");
    let invalid = message(&app, &key, &json!({"model": "claude-bill"})).await;
    anthropic(&invalid, 400, "invalid_request", "invalid_request_error");
    let unknown = message(&app, &key, &hello("nope")).await;
    anthropic(&unknown, 404, "not_found", "not_found_error");
    let limited = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "l", "permissions": ["ai_gateway"], "allowed_models": ["echo"]}),
        )
        .await
        .data(201);
    let limited = limited["key"].as_str().unwrap().to_owned();
    let outside = message(&app, &limited, &hello("claude-bill")).await;
    anthropic(&outside, 403, "forbidden", "permission_error");
    let wrong_method = app.get(PATH, Auth::Bearer(&key)).await;
    anthropic(&wrong_method, 405, "method_not_allowed", "invalid_request_error");

    let refused = message(&app, &key, &hello("claude-400")).await;
    let error = anthropic(&refused, 400, "upstream_rejected", "invalid_request_error");
    let text = error["message"].as_str().unwrap();
    assert!(text.starts_with("max_tokens: too large"), "the upstream's message: {text}");
    assert!(!refused.text.contains(PROVIDER_KEY), "the provider's key scrubbed: {text}");
    assert_eq!(error["details"]["type"], "invalid_request_error");
    let limited = message(&app, &key, &hello("claude-429")).await;
    anthropic(&limited, 429, "upstream_rejected", "rate_limit_error");
    assert_eq!(limited.header("retry-after"), Some("7"));
    let overloaded = message(&app, &key, &hello("claude-529")).await;
    anthropic(&overloaded, 502, "upstream_error", "api_error");
    let ok = message(&app, &key, &hello("claude-bill")).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert!(ok.json().get("success").is_none(), "a success is the provider's, unchanged");
}

async fn a_clamped_message_lowers_max_tokens(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, anthropic_provider(&upstream.base_url)).await;
    let user = app.new_user("msg-clamp").await;
    // $1.00 buys 1 000 output tokens; the call asks for 5 000.
    let body = json!({"name": "c", "permissions": ["ai_gateway", "read"], "max_budget_usd": 1.0,
                      "budget_mode": "clamp"});
    let made = app.create_key_raw(Auth::Bearer(&user.token), &body).await.data(201);
    let key = made["key"].as_str().unwrap().to_owned();
    let big = json!({"model": "claude-bill", "max_tokens": 5000,
                     "messages": [{"role": "user", "content": "write a long story"}]});
    let reply = message(&app, &key, &big).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let sent: Value = serde_json::from_slice(&upstream.requests().last().unwrap().body).unwrap();
    let lowered = sent["max_tokens"].as_u64().unwrap();
    assert!((500..1000).contains(&lowered), "lowered to what is left: {lowered}");
    let spent = cost_of(&records_of(&app, &[&user], 1).await);
    assert!(spent <= 1.0 + 1e-9, "spent ${spent}");
}

/// 200 calls at once over two nodes, each billed its body's bytes (a quarter at the cache
/// write's price, above the input's) and 100 output tokens, on a budget worth 20 of their
/// worst case (the whole prompt at the cache write's price): at most the budget is spent,
/// plain and streamed, and no more calls pass than the budget pays bills for.
async fn messages_budgets_hold_over_two_nodes_plain_and_streamed(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let a = spawn_app_with(backend, anthropic_provider(&upstream.base_url)).await;
    let b = a.spawn_sibling(anthropic_provider(&upstream.base_url)).await;
    for stream in [false, true] {
        let body = json!({"model": "claude-bill", "max_tokens": 100, "stream": stream,
                          "messages": [{"role": "user", "content": "x".repeat(400)}]});
        let len = serde_json::to_vec(&body).unwrap().len() as u64;
        // The prompt at the cache write's price (the highest), and the output.
        let worst = ((len + 7) as f64 * 1.25 + 100.0) * USD_PER_MILLION / 1e6;
        let budget = 20.0 * worst;
        let user = a.new_user("msg-burst").await;
        let made = a
            .create_key_raw(
                Auth::Bearer(&user.token),
                &json!({"name": "k", "permissions": ["ai_gateway", "read"], "max_budget_usd": budget}),
            )
            .await
            .data(201);
        let key = made["key"].as_str().unwrap().to_owned();
        let (ok, _) = fire_at([&a, &b], PATH, &[key], &body, 200).await;
        // Each call settles at its bill, below its worst case: what it frees admits more.
        let most = (budget / cost(billed_usage(&body, len))).floor() as usize;
        assert!(
            (15..=most).contains(&ok),
            "{ok} calls admitted on a budget for 20 worst cases, {most} bills (stream: {stream})"
        );
        let spent = cost_of(&records_of(&a, &[&user], ok).await);
        assert!(spent <= budget + 1e-9, "spent ${spent:.4} of ${budget:.4} (stream: {stream})");
    }
}
