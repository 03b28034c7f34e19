//! `POST /api/v1/ai/responses` (OpenAI's Responses API), black box on both backends against
//! the fake upstream's `/responses` (`common::upstream_responses`, which bills a token per
//! byte of the body, half of it cached, and `max_output_tokens`, half of it reasoning): the
//! answer and the stream passed through unchanged; usage read from the response (a stream's
//! `response.completed`) and priced with the cached-input price; input the gateway cannot
//! see reserved at the model's context window, or refused without one; `background` refused;
//! clamp mode lowers `max_output_tokens`; 200 concurrent calls over two nodes, plain and
//! streamed, spend at most a budget worth 20.

use crate::common::gateway_calls::{cost_of, fire_at, records_of};
use crate::common::upstream::FakeUpstream;
use crate::common::upstream_responses::{billed_usage, DELTAS, TEXT};
use crate::common::*;
use aigw_http::settings::Settings;
use aigw_service::{PriceConfig, ProviderConfig, ProviderKind};
use serde_json::{json, Value};
use std::collections::BTreeMap;

backend_tests!(
    responses_are_passed_through_and_metered_with_cached_and_reasoning_tokens,
    unseen_input_is_reserved_at_the_context_window_or_refused,
    a_clamped_response_lowers_max_output_tokens,
    responses_budgets_hold_over_two_nodes_plain_and_streamed,
);

/// USD per million input and output tokens of `resp-bill`; cached input costs a tenth.
const USD_PER_MILLION: f64 = 1000.0;

/// The context window of `resp-window`, in tokens.
const WINDOW: u64 = 100_000;

/// A node whose provider `oa` (at `upstream`) serves `resp-bill`, `resp-nousage`,
/// `resp-break` and `resp-window` (context window [`WINDOW`]), all priced.
fn responses_provider(upstream: &str) -> impl Fn(&mut Settings) + '_ {
    move |s: &mut Settings| {
        let price = PriceConfig {
            input_per_million: USD_PER_MILLION,
            output_per_million: USD_PER_MILLION,
            cached_input_per_million: Some(USD_PER_MILLION / 10.0),
            ..PriceConfig::default()
        };
        let models = ["resp-bill", "resp-nousage", "resp-break", "resp-window"];
        s.providers = vec![ProviderConfig {
            name: "oa".into(),
            kind: ProviderKind::Openai,
            base_url: Some(upstream.to_owned()),
            api_key: Some("sk-provider".to_owned().into()),
            models: models.iter().map(|m| (*m).to_owned()).collect(),
            prices: models.iter().map(|m| ((*m).to_owned(), price)).collect(),
            context_windows: BTreeMap::from([("resp-window".to_owned(), WINDOW)]),
            ..ProviderConfig::default()
        }];
        s.usage.flush_interval_ms = 20;
    }
}

/// The cost in USD of a call the fake billed `(input, cached, output, reasoning)`.
fn cost((input, cached, output, _): (u64, u64, u64, u64)) -> f64 {
    let micros = (input - cached) as f64 * USD_PER_MILLION
        + cached as f64 * USD_PER_MILLION / 10.0
        + output as f64 * USD_PER_MILLION;
    micros / 1e6
}

/// The responses endpoint.
const PATH: &str = "/api/v1/ai/responses";

/// Posts `body` to the responses endpoint of `app` with `key`.
async fn respond(app: &TestApp, key: &str, body: &Value) -> Reply {
    app.post(PATH, Auth::Bearer(key), body).await
}

async fn responses_are_passed_through_and_metered_with_cached_and_reasoning_tokens(
    backend: Backend,
) {
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, responses_provider(&upstream.base_url)).await;
    let user = app.new_user("resp").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;

    let plain = json!({"model": "resp-bill", "input": "say hello", "max_output_tokens": 40,
                       "instructions": "be brief", "tools": [{"type": "function", "name": "f",
                       "parameters": {"type": "object"}}]});
    let reply = respond(&app, &key, &plain).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["output"][0]["content"][0]["text"], TEXT);
    let sent = upstream.requests().last().cloned().unwrap();
    assert_eq!(sent.path, "/responses");
    assert_eq!(sent.headers["authorization"], "Bearer sk-provider");
    assert_eq!(serde_json::from_slice::<Value>(&sent.body).unwrap(), plain, "passed through");
    let plain_billed = billed_usage(&plain, sent.body.len() as u64);

    let streamed = json!({"model": "resp-bill", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "say hello"}]}], "stream": true});
    let reply = respond(&app, &key, &streamed).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.header("content-type").unwrap_or_default().starts_with("text/event-stream"));
    let texts: Vec<&str> = reply
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| d.contains("output_text.delta"))
        .collect();
    assert_eq!(texts.len(), DELTAS.len(), "{}", reply.text);
    assert!(reply.text.contains("response.completed"), "the stream reached its end");
    let sent = upstream.requests().last().cloned().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&sent.body).unwrap(), streamed, "unchanged");
    let streamed_billed = billed_usage(&streamed, sent.body.len() as u64);

    let nousage = respond(&app, &key, &json!({"model": "resp-nousage", "input": "x"})).await;
    assert_eq!(nousage.status, 200, "{}", nousage.text);
    let broken = app
        .request(reqwest::Method::POST, PATH, Auth::Bearer(&key))
        .json(&json!({"model": "resp-break", "input": "x", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(broken.status(), 200, "the head came before the break");
    assert!(broken.bytes().await.is_err(), "the caller sees the stream cut");

    let found = records_of(&app, &[&user], 4).await;
    let by_model = |model: &str, streamed: bool| {
        found
            .iter()
            .find(|r| r["model"] == model && r["streamed"] == streamed)
            .cloned()
            .unwrap_or_else(|| panic!("no record of {model}: {found:?}"))
    };
    for (record, billed) in [
        (by_model("resp-bill", false), plain_billed),
        (by_model("resp-bill", true), streamed_billed),
    ] {
        assert_eq!(record["prompt_tokens"].as_u64(), Some(billed.0), "{record}");
        assert_eq!(record["completion_tokens"].as_u64(), Some(billed.2), "{record}");
        assert_eq!(record["estimated"], false, "{record}");
        assert_eq!(record["outcome"], "ok", "{record}");
        let expected = cost(billed);
        let recorded = record["cost_usd"].as_f64().unwrap();
        assert!((recorded - expected).abs() < 1e-6, "cached input at its price: {record}");
    }
    let estimated = by_model("resp-nousage", false);
    assert_eq!(estimated["estimated"], true, "{estimated}");
    assert!(estimated["completion_tokens"].as_u64().unwrap() >= 1, "{estimated}");
    let cut = by_model("resp-break", true);
    assert_eq!(cut["outcome"], "upstream_error", "{cut}");
    assert!(cut["prompt_tokens"].as_u64().unwrap() >= 1, "billed for what it read: {cut}");
}

async fn unseen_input_is_reserved_at_the_context_window_or_refused(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, responses_provider(&upstream.base_url)).await;
    let user = app.new_user("resp-unseen").await;
    let free = app.key(&user.token, &["ai_gateway"]).await;
    let budget = |usd: f64| json!({"name": "b", "permissions": ["ai_gateway", "read"], "max_budget_usd": usd});
    let small = app.create_key_raw(Auth::Bearer(&user.token), &budget(1.0)).await.data(201);
    let small = small["key"].as_str().unwrap().to_owned();
    // The window's worth at the input price, and room for the output.
    let window_usd = WINDOW as f64 * USD_PER_MILLION / 1e6;
    let large =
        app.create_key_raw(Auth::Bearer(&user.token), &budget(window_usd + 50.0)).await.data(201);
    let large = large["key"].as_str().unwrap().to_owned();

    let follow_up = |model: &str| {
        json!({"model": model, "previous_response_id": "resp_1", "input": "and then?",
               "max_output_tokens": 16})
    };
    let before = upstream.requests().len();
    respond(&app, &small, &follow_up("resp-bill")).await.invalid("previous_response_id");
    let file = json!({"model": "resp-bill", "input": [{"role": "user", "content": [
        {"type": "input_file", "file_id": "file-1"}]}]});
    respond(&app, &small, &file).await.invalid("input[0].content[0].file_id");
    let refused = respond(&app, &small, &follow_up("resp-window")).await;
    let error = refused.error(429, "budget_exceeded");
    assert!(error["details"]["reserved_usd"].as_f64().unwrap() >= window_usd, "{error}");
    assert_eq!(upstream.requests().len(), before, "nothing refused went upstream");

    for key in [&free, &large] {
        let reply = respond(&app, key, &follow_up("resp-window")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let reply = respond(&app, &free, &follow_up("resp-bill")).await;
    assert_eq!(reply.status, 200, "a key without limits is not refused: {}", reply.text);
    let background = json!({"model": "resp-bill", "input": "x", "background": true});
    respond(&app, &free, &background).await.invalid("background");
    respond(&app, &free, &json!({"model": "resp-bill", "max_output_tokens": 0}))
        .await
        .invalid("max_output_tokens");
    respond(&app, &free, &json!({"model": "echo", "input": "x"})).await.invalid("model");
}

async fn a_clamped_response_lowers_max_output_tokens(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, responses_provider(&upstream.base_url)).await;
    let user = app.new_user("resp-clamp").await;
    // $1.00 buys 1 000 tokens; the call asks for 5 000 output tokens.
    let body = json!({"name": "c", "permissions": ["ai_gateway", "read"], "max_budget_usd": 1.0,
                      "budget_mode": "clamp"});
    let made = app.create_key_raw(Auth::Bearer(&user.token), &body).await.data(201);
    let key = made["key"].as_str().unwrap().to_owned();
    let big =
        json!({"model": "resp-bill", "input": "write a long story", "max_output_tokens": 5000});
    let reply = respond(&app, &key, &big).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let sent: Value = serde_json::from_slice(&upstream.requests().last().unwrap().body).unwrap();
    let lowered = sent["max_output_tokens"].as_u64().unwrap();
    assert!((500..1000).contains(&lowered), "lowered to what is left: {lowered}");
    let spent = cost_of(&records_of(&app, &[&user], 1).await);
    assert!(spent <= 1.0 + 1e-9, "spent ${spent}");
}

/// 200 calls at once over two nodes, each billed its body's bytes and 100 output tokens, on
/// a budget worth 20 of their worst cases: at most the budget is spent, plain and streamed.
async fn responses_budgets_hold_over_two_nodes_plain_and_streamed(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let a = spawn_app_with(backend, responses_provider(&upstream.base_url)).await;
    let b = a.spawn_sibling(responses_provider(&upstream.base_url)).await;
    for stream in [false, true] {
        let body = json!({"model": "resp-bill", "input": "x".repeat(400), "max_output_tokens": 100,
                          "stream": stream});
        let len = serde_json::to_vec(&body).unwrap().len() as u64;
        let worst = (len + 20 + 100) as f64 * USD_PER_MILLION / 1e6;
        let budget = 20.0 * worst;
        let user = a.new_user("resp-burst").await;
        let made = a
            .create_key_raw(
                Auth::Bearer(&user.token),
                &json!({"name": "k", "permissions": ["ai_gateway", "read"], "max_budget_usd": budget}),
            )
            .await
            .data(201);
        let key = made["key"].as_str().unwrap().to_owned();
        let (ok, _) = fire_at([&a, &b], PATH, &[key], &body, 200).await;
        // Calls settle below their worst case (half the prompt is cached, at a tenth of the
        // price) as they end, so more than 20 may fit; what may never pass is the budget.
        assert!(ok >= 15, "{ok} calls admitted on a budget for 20 worst cases (stream: {stream})");
        let spent = cost_of(&records_of(&a, &[&user], ok).await);
        assert!(spent <= budget + 1e-9, "spent ${spent:.4} of ${budget:.4} (stream: {stream})");
    }
}
