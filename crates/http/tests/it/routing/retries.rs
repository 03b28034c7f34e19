//! Retries: only before the caller received anything, on another deployment while one is
//! untried, honouring the upstream's `Retry-After`; a stream that breaks is never retried;
//! the serving deployment's price is what the ledger holds.

use super::{caller, content, cost_at, deployment, priced, served};
use crate::common::flaky_upstream::{Fault, FlakyUpstream};
use crate::common::gateway_calls::records_of;
use crate::common::*;
use futures_util::StreamExt;
use serde_json::json;
use std::time::{Duration, Instant};

/// `x-aigw-deployment` and `x-aigw-attempts` of a streamed answer's head.
fn served_of(headers: &reqwest::header::HeaderMap) -> (String, u32) {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    (text("x-aigw-deployment").to_owned(), text("x-aigw-attempts").parse().unwrap_or(0))
}

backend_tests!(
    a_failed_attempt_is_retried_on_the_other_deployment_and_billed_at_its_price,
    a_retry_after_within_the_cap_is_waited_for_on_a_single_deployment,
    a_stream_broken_after_its_first_chunk_is_not_retried_and_is_billed,
    a_refusal_of_the_request_is_not_retried,
    a_call_no_deployment_served_is_recorded_at_the_deployment_tried_last,
);

async fn a_failed_attempt_is_retried_on_the_other_deployment_and_billed_at_its_price(
    backend: Backend,
) {
    let a = FlakyUpstream::start("a").await;
    let b = FlakyUpstream::start("b").await;
    // Weight 0: b serves only when a cannot, so a is always tried first.
    let (first, second) = (
        priced(deployment(&a, &["m"], 1), "m", 1.0, 1.0),
        priced(deployment(&b, &["m"], 0), "m", 2.0, 8.0),
    );
    let app = spawn_app_with(backend, move |s| s.providers = vec![first, second]).await;
    let (user, key) = caller(&app, "retry", json!({})).await;
    for (n, fault) in
        [Fault::Status(503, None), Fault::Status(429, None), Fault::Reset].into_iter().enumerate()
    {
        a.fail_next(1, fault);
        let reply = app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await;
        assert_eq!(reply.status, 200, "{fault:?}: {}", reply.text);
        assert_eq!(content(&reply), "from b", "{fault:?}");
        assert_eq!(served(&reply), ("b/m".to_owned(), 2), "{fault:?}");
        assert_eq!((a.requests(), b.requests()), (n + 1, n + 1), "{fault:?}");
    }
    let records = records_of(&app, &[&user], 3).await;
    for record in &records {
        assert_eq!(record["provider"], json!("b"), "{record}");
        assert_eq!(record["served_model"], json!("m"), "{record}");
        assert_eq!(record["attempts"], json!(2), "{record}");
        assert_eq!(record["outcome"], json!("ok"), "{record}");
        let cost = record["cost_usd"].as_f64().unwrap_or_default();
        assert!((cost - cost_at(2.0, 8.0)).abs() < 1e-12, "billed at b's price: {record}");
    }
}

async fn a_retry_after_within_the_cap_is_waited_for_on_a_single_deployment(backend: Backend) {
    let a = FlakyUpstream::start("a").await;
    let only = deployment(&a, &["m"], 1);
    let app = spawn_app_with(backend, move |s| {
        s.providers = vec![only];
        s.gateway.retry_after_max_secs = 2;
    })
    .await;
    let (_, key) = caller(&app, "retryafter", json!({})).await;
    a.fail_next(1, Fault::Status(429, Some(1)));
    let started = Instant::now();
    let reply = app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After: 1 was not waited for");
    assert_eq!(served(&reply), ("a/m".to_owned(), 2));
    // Longer than gateway.retry_after_max_secs: not waited for; the caller gets the 429.
    a.fail_next(1, Fault::Status(429, Some(30)));
    let reply = app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await;
    reply.error(429, "upstream_rejected");
    assert_eq!(reply.header("retry-after"), Some("30"));
    assert_eq!(a.requests(), 3);
}

async fn a_stream_broken_after_its_first_chunk_is_not_retried_and_is_billed(backend: Backend) {
    let a = FlakyUpstream::start("a").await;
    let b = FlakyUpstream::start("b").await;
    let (first, second) = (deployment(&a, &["m"], 1), deployment(&b, &["m"], 0));
    let app = spawn_app_with(backend, move |s| s.providers = vec![first, second]).await;
    let (user, key) = caller(&app, "broken", json!({})).await;
    a.fail(Fault::BreakStream);
    let mut body = chat_body("m", "hi");
    body["stream"] = json!(true);
    let response = app
        .request(reqwest::Method::POST, "/api/v1/ai/chat/completions", Auth::Bearer(&key))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "the stream's head was sent");
    assert_eq!(served_of(response.headers()), ("a/m".to_owned(), 1));
    // What arrived before the stream broke off: a's first chunk, nothing of b's.
    let mut text = String::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("from a"), "the first chunk reached the caller: {text}");
    assert!(!text.contains("from b") && !text.contains("\"b\""), "{text}");
    assert_eq!((a.requests(), b.requests()), (1, 0), "a broken stream was retried");
    let records = records_of(&app, &[&user], 1).await;
    let record = &records[0];
    assert_eq!(record["provider"], json!("a"), "{record}");
    assert_eq!(record["attempts"], json!(1), "{record}");
    assert_eq!(record["outcome"], json!("upstream_error"), "{record}");
    assert!(record["completion_tokens"].as_u64().unwrap_or_default() > 0, "billed: {record}");
}

async fn a_refusal_of_the_request_is_not_retried(backend: Backend) {
    let a = FlakyUpstream::start("a").await;
    let b = FlakyUpstream::start("b").await;
    let (first, second) = (deployment(&a, &["m"], 1), deployment(&b, &["m"], 0));
    let app = spawn_app_with(backend, move |s| s.providers = vec![first, second]).await;
    let (_, key) = caller(&app, "refused", json!({})).await;
    for status in [400, 401, 403, 404, 422] {
        a.fail_next(1, Fault::Status(status, None));
        let reply = app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await;
        assert!(matches!(reply.status, 400..=502), "{status}: {}", reply.text);
        assert_ne!(reply.status, 200, "{status} was retried: {}", reply.text);
    }
    assert_eq!((a.requests(), b.requests()), (5, 0), "a refused request was retried");
}

/// Every attempt failed: the call's record names the deployment the last attempt went to,
/// with the attempts made.
async fn a_call_no_deployment_served_is_recorded_at_the_deployment_tried_last(backend: Backend) {
    let a = FlakyUpstream::start("a").await;
    let b = FlakyUpstream::start("b").await;
    // Weight 0: b only once a was tried.
    let (first, second) = (deployment(&a, &["m"], 1), deployment(&b, &["m"], 0));
    let app = spawn_app_with(backend, move |s| {
        s.providers = vec![first, second];
        s.gateway.max_attempts = 2;
    })
    .await;
    let (user, key) = caller(&app, "tried", json!({})).await;
    a.fail(Fault::Status(500, None));
    b.fail(Fault::Status(500, None));
    let reply = app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!((a.requests(), b.requests()), (1, 1), "one attempt at each");
    let records = records_of(&app, &[&user], 1).await;
    let record = &records[0];
    assert_eq!(record["provider"], json!("b"), "{record}");
    assert_eq!(record["attempts"], json!(2), "{record}");
    assert_eq!(record["outcome"], json!("upstream_error"), "{record}");
}
