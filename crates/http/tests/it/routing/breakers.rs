//! Circuit breakers: a failing deployment of two costs no caller anything and gets no call
//! once its breaker is open; a single failing deployment answers 503 with `Retry-After` at
//! once instead of waiting on a dead upstream, on every node after one slow call there; one
//! probe closes the breaker again.

use super::{breaker, caller, content, deployment, served};
use crate::common::flaky_upstream::{Fault, FlakyUpstream};
use crate::common::*;
use futures_util::StreamExt;
use serde_json::json;
use std::time::{Duration, Instant};

backend_tests!(
    one_failing_deployment_of_two_fails_no_call_and_gets_none_once_open,
    a_single_dead_deployment_costs_one_slow_call_per_node_then_503_at_once,
    one_probe_closes_the_breaker,
    a_deployment_at_its_own_quota_is_skipped_not_failed,
);

async fn one_failing_deployment_of_two_fails_no_call_and_gets_none_once_open(backend: Backend) {
    let a = FlakyUpstream::start("a").await;
    let b = FlakyUpstream::start("b").await;
    a.fail(Fault::Status(500, None));
    let (first, second) = (deployment(&a, &["m"], 1), deployment(&b, &["m"], 1));
    let app = spawn_app_with(backend, move |s| {
        s.providers = vec![first, second];
        s.gateway.breaker = breaker(3, 3600);
    })
    .await;
    let (_, key) = caller(&app, "twodeploy", json!({})).await;
    const CALLS: usize = 1000;
    const AT_ONCE: usize = 16;
    let body = chat_body("m", "hi");
    let replies: Vec<Reply> = futures_util::stream::iter(0..CALLS)
        .map(|_| app.chat(Auth::Bearer(&key), &body))
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    let mut retried = 0;
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(content(reply), "from b");
        let (deployment, attempts) = served(reply);
        assert_eq!(deployment, "b/m");
        retried += attempts as usize - 1;
    }
    // Every attempt at a shows as a second attempt of its call: nothing is hidden.
    assert_eq!(retried, a.requests(), "attempts counted in the answers vs a's requests");
    // Opened after 3 failures in a row; calls already on their way when it opened count too.
    assert!(a.requests() <= 3 + AT_ONCE, "a got {} calls", a.requests());
    let before = a.requests();
    for _ in 0..50 {
        let reply = app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await;
        assert_eq!(served(&reply), ("b/m".to_owned(), 1), "{}", reply.text);
    }
    assert_eq!(a.requests(), before, "a call reached a deployment whose breaker is open");
    let metrics = app.get("/metrics", Auth::None).await;
    assert!(metrics.text.contains("aigw_breaker_state{deployment=\"a/m\"} 1"), "{}", metrics.text);
}

async fn a_single_dead_deployment_costs_one_slow_call_per_node_then_503_at_once(backend: Backend) {
    let a = FlakyUpstream::start("a").await;
    a.fail(Fault::Hang);
    let only = deployment(&a, &["m"], 1);
    let settings = move |s: &mut aigw_http::settings::Settings| {
        s.providers = vec![only.clone()];
        s.gateway.upstream_timeout_secs = 1;
        s.gateway.max_attempts = 1;
        s.gateway.breaker = breaker(1, 3600);
    };
    let app = spawn_app_with(backend, settings.clone()).await;
    let sibling = app.spawn_sibling(settings).await;
    let (_, key) = caller(&app, "deadone", json!({})).await;
    for (n, node) in [&app, &sibling].into_iter().enumerate() {
        let slow = node.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await;
        slow.error(504, "upstream_timeout");
        for _ in 0..5 {
            let started = Instant::now();
            let fast = node.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await;
            let elapsed = started.elapsed();
            let error = fast.error(503, "service_unavailable");
            assert_eq!(error["details"]["reason"], json!("breakers_open"), "{error}");
            let retry_after: u64 =
                fast.header("retry-after").and_then(|r| r.parse().ok()).unwrap_or(0);
            assert!((3000..=3600).contains(&retry_after), "Retry-After {retry_after}");
            // Not the upstream's timeout (1 s): answered without trying it.
            assert!(elapsed < Duration::from_millis(500), "waited {elapsed:?}");
        }
        assert_eq!(a.requests(), n + 1, "one slow call per node");
    }
    drop(sibling);
}

async fn one_probe_closes_the_breaker(backend: Backend) {
    let a = FlakyUpstream::start("a").await;
    a.fail(Fault::Status(500, None));
    let only = deployment(&a, &["m"], 1);
    let app = spawn_app_with(backend, move |s| {
        s.providers = vec![only];
        s.gateway.max_attempts = 1;
        s.gateway.breaker = breaker(1, 1);
    })
    .await;
    let (_, key) = caller(&app, "probe", json!({})).await;
    app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await.error(502, "upstream_error");
    app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await.error(503, "service_unavailable");
    assert_eq!(a.requests(), 1);
    // The probe fails: open again for a cooldown.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await.error(502, "upstream_error");
    app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await.error(503, "service_unavailable");
    assert_eq!(a.requests(), 2);
    // The upstream is back: the next probe succeeds and closes it.
    a.heal();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..3 {
        let reply = app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    assert_eq!(a.requests(), 5);
}

async fn a_deployment_at_its_own_quota_is_skipped_not_failed(backend: Backend) {
    let a = FlakyUpstream::start("a").await;
    let b = FlakyUpstream::start("b").await;
    let mut first = deployment(&a, &["m", "solo"], 1);
    first.rpm_limit = Some(2);
    let second = deployment(&b, &["m"], 0);
    let app = spawn_app_with(backend, move |s| s.providers = vec![first, second]).await;
    let (_, key) = caller(&app, "quota", json!({})).await;
    let mut deployments = Vec::new();
    for _ in 0..5 {
        let reply = app.chat(Auth::Bearer(&key), &chat_body("m", "hi")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        deployments.push(served(&reply));
    }
    // a's quota (2 a minute) taken, then b: no attempt is spent on a deployment at its quota.
    let a_m = ("a/m".to_owned(), 1);
    let b_m = ("b/m".to_owned(), 1);
    assert_eq!(deployments, [a_m.clone(), a_m, b_m.clone(), b_m.clone(), b_m]);
    assert_eq!((a.requests(), b.requests()), (2, 3));
    // A model whose only deployment is at its quota (counted per model: a/solo has its
    // own): 503 at once, nothing sent.
    for _ in 0..2 {
        let reply = app.chat(Auth::Bearer(&key), &chat_body("solo", "hi")).await;
        assert_eq!(served(&reply), ("a/solo".to_owned(), 1), "{}", reply.text);
    }
    let refused = app.chat(Auth::Bearer(&key), &chat_body("solo", "hi")).await;
    let error = refused.error(503, "service_unavailable");
    assert_eq!(error["details"]["reason"], json!("at_quota"), "{error}");
    assert!(refused.header("retry-after").is_some());
    assert_eq!(a.requests(), 4);
}
