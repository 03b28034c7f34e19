//! Fallback models: tried when every deployment of the requested model failed (or, for the
//! context-window fallbacks, when the upstream refused the request as too long); taken only
//! when the key's `allowed_models` allow them and their own price fits its budget; billed at
//! the price of what served; and 200 calls on a budget during a failover spend at most it.

use super::{breaker, caller, content, cost_at, deployment, priced, served};
use crate::common::flaky_upstream::{Fault, FlakyUpstream};
use crate::common::gateway_calls::{cost_of, fire_at, records_of};
use crate::common::*;
use aigw_service::ProviderConfig;
use serde_json::json;
use std::collections::BTreeMap;

backend_tests!(
    a_fallback_serves_when_the_model_fails_and_is_billed_at_its_price,
    a_fallback_outside_allowed_models_or_the_budget_is_not_taken,
    a_prompt_too_long_goes_to_the_context_window_fallback,
    two_hundred_calls_on_a_budget_during_a_failover_spend_at_most_it,
);

/// `m` at `a` (failing), `cheap` and `dear` at `b`, `long` at `b`; `m` falls back to
/// `fallbacks` and, when too long, to `long`.
fn providers(a: &FlakyUpstream, b: &FlakyUpstream) -> Vec<ProviderConfig> {
    let mut at_b = deployment(b, &["cheap", "dear", "long"], 1);
    at_b.prices = BTreeMap::from([
        ("cheap".to_owned(), price(1.0, 2.0)),
        ("dear".to_owned(), price(1_000_000.0, 1_000_000.0)),
    ]);
    vec![priced(deployment(a, &["m"], 1), "m", 3.0, 3.0), at_b]
}

fn price(input: f64, output: f64) -> aigw_service::config::PriceConfig {
    aigw_service::config::PriceConfig {
        input_per_million: input,
        output_per_million: output,
        ..Default::default()
    }
}

async fn app(
    backend: Backend,
    a: &FlakyUpstream,
    b: &FlakyUpstream,
    fallbacks: &[&str],
) -> TestApp {
    let providers = providers(a, b);
    let fallbacks: Vec<String> = fallbacks.iter().map(|m| (*m).to_owned()).collect();
    spawn_app_with(backend, move |s| {
        s.providers = providers;
        s.gateway.fallbacks = BTreeMap::from([("m".to_owned(), fallbacks)]);
        s.gateway.context_window_fallbacks =
            BTreeMap::from([("m".to_owned(), vec!["long".to_owned()])]);
        s.gateway.retry_backoff_ms = 10;
        // Every call tries m: no breaker opens on its failures.
        s.gateway.breaker = breaker(0, 1);
    })
    .await
}

async fn a_fallback_serves_when_the_model_fails_and_is_billed_at_its_price(backend: Backend) {
    let (a, b) = (FlakyUpstream::start("a").await, FlakyUpstream::start("b").await);
    a.fail(Fault::Status(502, None));
    let app = app(backend, &a, &b, &["cheap"]).await;
    let (user, key) = caller(&app, "fallback", json!({})).await;
    let reply = app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(content(&reply), "from b");
    // Three attempts at m's one deployment, then one at the fallback.
    assert_eq!(served(&reply), ("b/cheap".to_owned(), 4));
    assert_eq!(a.requests(), 3);
    assert_eq!(b.models(), ["cheap"], "the body sent to the fallback names it");
    let records = records_of(&app, &[&user], 1).await;
    let record = &records[0];
    assert_eq!(record["model"], json!("m"), "{record}");
    assert_eq!(record["served_model"], json!("cheap"), "{record}");
    assert_eq!(record["provider"], json!("b"), "{record}");
    assert_eq!(record["attempts"], json!(4), "{record}");
    let cost = record["cost_usd"].as_f64().unwrap_or_default();
    assert!((cost - cost_at(1.0, 2.0)).abs() < 1e-12, "billed at cheap's price: {record}");
    let metrics = app.get("/metrics", Auth::None).await.text;
    assert!(
        metrics.contains("aigw_fallbacks_total{model=\"m\",fallback=\"cheap\"} 1"),
        "{metrics}"
    );
}

async fn a_fallback_outside_allowed_models_or_the_budget_is_not_taken(backend: Backend) {
    let (a, b) = (FlakyUpstream::start("a").await, FlakyUpstream::start("b").await);
    a.fail(Fault::Status(500, None));
    let app = app(backend, &a, &b, &["dear"]).await;
    // Not allowed: the call fails as m failed.
    let (_, limited) = caller(&app, "notallowed", json!({"allowed_models": ["m"]})).await;
    app.chat(Auth::Bearer(&limited), &chat_body("m", "hi")).await.error(502, "upstream_error");
    assert_eq!(b.requests(), 0, "a fallback outside allowed_models was called");
    // Allowed but unaffordable: refused as the budget refusal it is, nothing spent.
    let (_, budgeted) = caller(&app, "unaffordable", json!({"max_budget_usd": 1.0})).await;
    let refused = app.chat(Auth::Bearer(&budgeted), &chat_body("m", "hi")).await;
    let error = refused.error(429, "budget_exceeded");
    assert_eq!(error["details"]["scope"], json!("key"), "{error}");
    assert_eq!(b.requests(), 0, "an unaffordable fallback was called");
    // The reservation was given back: m, once healthy, is served within the same budget.
    a.heal();
    let reply = app.chat(Auth::Bearer(&budgeted), &chat_body("m", "hi")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

async fn a_prompt_too_long_goes_to_the_context_window_fallback(backend: Backend) {
    let (a, b) = (FlakyUpstream::start("a").await, FlakyUpstream::start("b").await);
    a.fail(Fault::TooLong);
    let app = app(backend, &a, &b, &["cheap"]).await;
    let (_, key) = caller(&app, "toolong", json!({})).await;
    let reply = app.chat(Auth::Bearer(&key), &chat_body("m", "a long prompt")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(served(&reply), ("b/long".to_owned(), 2), "not retried, not the plain fallback");
    assert_eq!((a.requests(), b.models()), (1, vec!["long".to_owned()]));
}

async fn two_hundred_calls_on_a_budget_during_a_failover_spend_at_most_it(backend: Backend) {
    let (a, b) = (FlakyUpstream::start("a").await, FlakyUpstream::start("b").await);
    // m at both: a fails, b serves; output tokens only are priced, so the worst case of a
    // call capped at FLAKY_USAGE's completion tokens is exactly what it costs.
    let (_, completion, _) = crate::common::flaky_upstream::FLAKY_USAGE;
    let per_call = cost_at(0.0, 100.0);
    let providers = vec![
        priced(deployment(&a, &["m"], 1), "m", 0.0, 100.0),
        priced(deployment(&b, &["m"], 1), "m", 0.0, 100.0),
    ];
    let settings = move |s: &mut aigw_http::settings::Settings| {
        s.providers = providers.clone();
        s.gateway.breaker = breaker(5, 3600);
    };
    let app = spawn_app_with(backend, settings.clone()).await;
    let sibling = app.spawn_sibling(settings).await;
    a.fail(Fault::Status(503, None));
    let (user, key) = caller(&app, "failover", json!({"max_budget_usd": 20.0 * per_call})).await;
    let mut body = chat_body("m", "hi");
    body["max_tokens"] = json!(completion);
    let (ok, refused) =
        fire_at([&app, &sibling], "/api/v1/ai/chat/completions", &[key], &body, 200).await;
    assert_eq!(ok, 20, "a budget for 20 calls let {ok} through");
    assert_eq!(refused.len(), 180);
    let records = records_of(&app, &[&user], 20).await;
    let spent = cost_of(&records);
    assert!(spent <= 20.0 * per_call + 1e-9, "spent {spent} of {}", 20.0 * per_call);
    assert!(records.iter().all(|r| r["provider"] == json!("b")), "{records:?}");
    drop(sibling);
}
