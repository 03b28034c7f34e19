//! The gateway's connections to its upstream providers (docs/decisions.md "Upstream
//! connections pooled per worker, on hyper's connections"): kept alive and reused, never a
//! half-read one, none that the upstream closed, and no request sent twice.
//!
//! One actix worker per app, so that every call shares one worker's pool; SQLite only, as the
//! pool has nothing to do with storage.

use crate::common;

use aigw_service::{ProviderConfig, ProviderKind};
use common::keep_alive::{KeepAliveUpstream, KEEP_ALIVE_JSON};
use common::*;
use serde_json::json;
use std::time::Duration;

async fn app_with(upstream: &KeepAliveUpstream) -> (TestApp, String) {
    let base = upstream.base_url.clone();
    let app = spawn_app_with(Backend::Sqlite, move |s| {
        s.server.workers = Some(1);
        // The pool's own behaviour, without the gateway's retries (docs/routing.md).
        s.gateway.max_attempts = 1;
        s.providers = vec![ProviderConfig {
            name: "kept".into(),
            kind: ProviderKind::Openai,
            base_url: Some(base),
            api_key: Some(secrecy::SecretString::from("sk-kept".to_owned())),
            models: ["ka-json", "ka-stream", "ka-slow-stream", "ka-drop"]
                .iter()
                .map(|m| (*m).to_owned())
                .collect(),
            tokenizers: Default::default(),
            prices: Default::default(),
            ..ProviderConfig::default()
        }];
    })
    .await;
    let user = app.new_user("kept").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    (app, key)
}

async fn json_call(app: &TestApp, key: &str) {
    let reply = app.chat(Auth::Bearer(key), &chat_body("ka-json", "hi")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.text, KEEP_ALIVE_JSON);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_reuse_one_kept_alive_upstream_connection() {
    let upstream = KeepAliveUpstream::start().await;
    let (app, key) = app_with(&upstream).await;
    for _ in 0..3 {
        json_call(&app, &key).await;
    }
    // A stream read to its end gives its connection back as well.
    let mut body = chat_body("ka-stream", "hi");
    body["stream"] = json!(true);
    let reply = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.text.ends_with("data: [DONE]\n\n"), "{}", reply.text);
    for _ in 0..2 {
        json_call(&app, &key).await;
    }
    let seen = upstream.seen();
    assert_eq!(seen.len(), 6, "{seen:?}");
    assert_eq!(upstream.connections(), 1, "every call on one connection: {seen:?}");
    let port = upstream.base_url.trim_start_matches("http://127.0.0.1:").trim_end_matches("/v1");
    for request in &seen {
        assert_eq!(request.target, "/v1/chat/completions", "origin-form: {request:?}");
        assert_eq!(request.host, format!("127.0.0.1:{port}"), "{request:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_upstream_closed_when_idle_cost_no_call() {
    let upstream = KeepAliveUpstream::closing_idle_after(Duration::from_millis(100)).await;
    let (app, key) = app_with(&upstream).await;
    for call in 1..=3 {
        json_call(&app, &key).await;
        // The upstream closes the idle connection before the next call.
        let closed = || {
            let ended = upstream.ended();
            std::future::ready(if ended.len() >= call { Ok(()) } else { Err(ended) })
        };
        eventually(
            "the upstream did not close its idle connection",
            Duration::from_secs(5),
            closed,
        )
        .await;
    }
    assert_eq!(upstream.connections(), 3, "{:?}", upstream.seen());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_stream_closes_its_connection_and_the_next_call_gets_another() {
    let upstream = KeepAliveUpstream::start().await;
    let (app, key) = app_with(&upstream).await;
    let mut body = chat_body("ka-slow-stream", "hi");
    body["stream"] = json!(true);
    let mut response = app
        .request(reqwest::Method::POST, "/api/v1/ai/chat/completions", Auth::Bearer(&key))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "), "{first:?}");
    drop(response);
    // The slow stream's connection is in use: the next call must not wait for it.
    json_call(&app, &key).await;
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_ne!(seen[0].connection, seen[1].connection, "{seen:?}");
    // The abandoned stream's connection is closed, not kept for later.
    let closed = || {
        let ended = upstream.ended();
        std::future::ready(if ended.contains(&seen[0].connection) { Ok(()) } else { Err(ended) })
    };
    eventually("the abandoned connection stayed open", Duration::from_secs(10), closed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_a_reused_connection_took_is_never_sent_again() {
    let upstream = KeepAliveUpstream::start().await;
    let (app, key) = app_with(&upstream).await;
    json_call(&app, &key).await;
    // Taken on the kept connection, then the connection closes without an answer.
    let reply = app.chat(Auth::Bearer(&key), &chat_body("ka-drop", "hi")).await;
    reply.error(502, "upstream_error");
    json_call(&app, &key).await;
    let seen = upstream.seen();
    let models: Vec<&str> = seen.iter().map(|s| s.model.as_str()).collect();
    assert_eq!(models, ["ka-json", "ka-drop", "ka-json"], "sent once: {seen:?}");
    assert_eq!(seen[1].connection, seen[0].connection, "the drop came on the kept one");
    assert_ne!(seen[2].connection, seen[1].connection, "a new connection after it");
}
