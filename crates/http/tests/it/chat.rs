//! `POST /api/v1/ai/chat/completions`: the built-in echo model and forwarding to a fake
//! OpenAI-compatible upstream.

use crate::common;

use aigw_service::{ProviderConfig, ProviderKind};
use common::upstream::{closed_port_url, FakeUpstream, UPSTREAM_JSON, UPSTREAM_SSE_PIECES};
use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

backend_tests!(
    echo_answers_openai_json,
    echo_accepts_bare_key_and_admin,
    echo_streams_server_sent_events,
    unknown_model_is_not_found,
    invalid_chat_bodies_name_the_field,
    chat_refuses_bad_credentials,
    upstream_gets_provider_key_and_unchanged_body,
    upstream_base_url_path_is_kept,
    upstream_stream_is_passed_through,
    upstream_stream_is_not_buffered,
    upstream_500_is_502,
    upstream_unreachable_is_502,
    upstream_hang_is_504,
);

const PROVIDER_KEY: &str = "sk-provider-secret-0123456789";

fn provider(base_url: &str, models: &[&str]) -> ProviderConfig {
    ProviderConfig {
        name: "fake".into(),
        kind: ProviderKind::Openai,
        base_url: Some(base_url.to_owned()),
        api_key: Some(secrecy::SecretString::from(PROVIDER_KEY.to_owned())),
        models: models.iter().map(|m| (*m).to_owned()).collect(),
        tokenizers: Default::default(),
        prices: Default::default(),
        ..ProviderConfig::default()
    }
}

/// An app with the fake upstream serving `up-*` models, and an `ai_gateway` key.
async fn app_with_upstream(
    backend: Backend,
    base_url: &str,
    timeout_secs: u64,
) -> (TestApp, String) {
    let base = base_url.to_owned();
    let app = spawn_app_with(backend, move |s| {
        s.providers = vec![provider(&base, &["up-json", "up-500", "up-hang", "up-gated"])];
        s.gateway.upstream_timeout_secs = timeout_secs;
    })
    .await;
    let user = app.new_user("upstream").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    (app, key)
}

/// The `data:` payloads of an SSE body, in order.
fn sse_data(text: &str) -> Vec<String> {
    text.split('\n')
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|d| d.trim().to_owned())
        .collect()
}

/// Concatenated `choices[0].delta.content` of chunk events (all but `[DONE]`).
fn delta_text(events: &[String]) -> String {
    events
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .map(|e| {
            let v: Value = serde_json::from_str(e).unwrap_or_else(|err| panic!("event {e}: {err}"));
            assert_eq!(v["object"], json!("chat.completion.chunk"), "event {v}");
            v["choices"][0]["delta"]["content"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

async fn echo_answers_openai_json(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("echo").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let body = json!({"model": "echo", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": "the last user message"}
    ]});
    let reply = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let ct = reply.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("application/json"), "content-type {ct}");
    let v = reply.json();
    assert!(v.get("success").is_none(), "chat is not enveloped: {v}");
    assert!(v["id"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
    assert_eq!(v["object"], json!("chat.completion"));
    assert!(v["created"].is_i64(), "{v}");
    assert_eq!(v["model"], json!("echo"));
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 1);
    assert_eq!(choices[0]["index"], json!(0));
    assert_eq!(choices[0]["message"]["role"], json!("assistant"));
    assert_eq!(choices[0]["message"]["content"], json!("the last user message"));
    assert_eq!(choices[0]["finish_reason"], json!("stop"));
    assert!(v["usage"].is_object(), "{v}");
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert!(v["usage"][k].is_u64(), "usage.{k}: {v}");
    }
}

async fn echo_accepts_bare_key_and_admin(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("echobare").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let reply = app.chat(Auth::Raw(&key), &chat_body("echo", "bare key")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["choices"][0]["message"]["content"], json!("bare key"));
    let admin = app.key(&user.token, &["admin"]).await;
    let reply = app.chat(Auth::Raw(&admin), &chat_body("echo", "admin key")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["choices"][0]["message"]["content"], json!("admin key"));
}

async fn echo_streams_server_sent_events(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("echostream").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let text = "stream me some words, please";
    let body = json!({"model": "echo", "stream": true, "messages": [
        {"role": "user", "content": "not this one"},
        {"role": "user", "content": text}
    ]});
    let reply = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let ct = reply.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
    let events = sse_data(&reply.text);
    assert!(events.len() >= 3, "events: {events:?}");
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(events.iter().filter(|e| e.as_str() == "[DONE]").count(), 1);
    assert_eq!(delta_text(&events), text);
    let first: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(first["model"], json!("echo"));
    // Every event is a `data:` line followed by a blank line.
    assert!(reply.text.ends_with("data: [DONE]\n\n"), "{:?}", reply.text);
}

async fn unknown_model_is_not_found(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("nomodel").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    app.chat(Auth::Bearer(&key), &chat_body("gpt-nonexistent", "hi"))
        .await
        .not_found("model", "gpt-nonexistent");
    // The echo model can be switched off.
    let app = spawn_app_with(backend, |s| s.gateway.echo_model = false).await;
    let user = app.new_user("noecho").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    app.chat(Auth::Bearer(&key), &chat_body("echo", "hi")).await.not_found("model", "echo");
}

async fn invalid_chat_bodies_name_the_field(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("chatbad").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let auth = Auth::Bearer(&key);
    let cases = [
        (json!({"messages": [{"role": "user", "content": "x"}]}), "model"),
        (json!({"model": 5, "messages": [{"role": "user", "content": "x"}]}), "model"),
        (json!({"model": "echo"}), "messages"),
        (json!({"model": "echo", "messages": "hi"}), "messages"),
        (json!({"model": "echo", "messages": [{"content": "x"}]}), "messages[0].role"),
        (
            json!({"model": "echo", "messages": [{"role": "user", "content": "x"}, {"role": "user", "content": 5}]}),
            "messages[1].content",
        ),
        (
            json!({"model": "echo", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}),
            "stream",
        ),
        (json!(["not", "an", "object"]), "body"),
    ];
    for (body, field) in cases {
        app.chat(auth, &body).await.invalid(field);
    }
    app.post_raw("/api/v1/ai/chat/completions", auth, "{\"model\": \"echo\",")
        .await
        .invalid("body");
}

async fn chat_refuses_bad_credentials(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("chatcred").await;
    let made = app.create_key(&user.token, &["ai_gateway"], None).await;
    let key = made["key"].as_str().unwrap();
    let body = chat_body("echo", "hi");
    app.chat(Auth::None, &body).await.unauthorized();
    app.chat(Auth::Bearer(&flip_char(key, 10)), &body).await.unauthorized();
    app.chat(Auth::Bearer(&user.refresh_token), &body).await.unauthorized();
    app.revoke_key(Auth::Bearer(&user.token), made["id"].as_str().unwrap()).await.data(200);
    app.chat(Auth::Bearer(key), &body).await.unauthorized();
}

async fn upstream_gets_provider_key_and_unchanged_body(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, key) = app_with_upstream(backend, &upstream.base_url, 30).await;
    // Odd formatting and extra fields: forwarded byte for byte.
    let raw = "{ \"model\" : \"up-json\",\n  \"messages\": [{\"role\":\"user\",\"content\":\"h\\u00e9llo\"}],\"temperature\":0.25,\"x_extra\":{\"nested\":[1,2,3]} }";
    let reply = app.post_raw("/api/v1/ai/chat/completions", Auth::Bearer(&key), raw).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.text, UPSTREAM_JSON, "the upstream body must come back unchanged");
    let ct = reply.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("application/json"), "content-type {ct}");
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let r = &requests[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/chat/completions");
    assert_eq!(
        r.headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {PROVIDER_KEY}").as_str()),
        "the provider's key must be sent"
    );
    assert_eq!(String::from_utf8_lossy(&r.body), raw, "body must be forwarded unchanged");
    for (name, value) in &r.headers {
        assert!(
            !value.contains(&key) && !value.contains(&key[..12]),
            "the caller's key leaked upstream in {name}: {value}"
        );
    }
    // Bare key form too.
    let reply = app.chat(Auth::Raw(&key), &chat_body("up-json", "again")).await;
    assert_eq!(reply.text, UPSTREAM_JSON);
    assert_eq!(upstream.requests().len(), 2);
}

async fn upstream_base_url_path_is_kept(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, key) = app_with_upstream(backend, &format!("{}/v1/", upstream.base_url), 30).await;
    let _ = app.chat(Auth::Bearer(&key), &chat_body("up-json", "x")).await;
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/chat/completions");
}

async fn upstream_stream_is_passed_through(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, key) = app_with_upstream(backend, &upstream.base_url, 30).await;
    let body =
        json!({"model": "up-json", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let reply = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let ct = reply.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
    let events = sse_data(&reply.text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(delta_text(&events), UPSTREAM_SSE_PIECES.concat());
    let first: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(first["id"], json!("chatcmpl-upstream-stream"));
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {PROVIDER_KEY}").as_str())
    );
    // Byte for byte, but for the usage request the meter adds right after the opening brace
    // (the caller did not ask for usage; tests/it/usage checks it never sees it).
    let sent = serde_json::to_string(&body).unwrap();
    let expected = format!("{{\"stream_options\":{{\"include_usage\":true}},{}", &sent[1..]);
    assert_eq!(String::from_utf8_lossy(&requests[0].body), expected);
}

async fn upstream_stream_is_not_buffered(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, key) = app_with_upstream(backend, &upstream.base_url, 30).await;
    let body = json!({"model": "up-gated", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let response = app
        .request(reqwest::Method::POST, "/api/v1/ai/chat/completions", Auth::Bearer(&key))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers().get("x-request-id").is_some());
    let mut stream = response.bytes_stream();
    // The upstream has sent only its first event and waits: it must already reach us.
    let mut received = Vec::new();
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        while !String::from_utf8_lossy(&received).contains("\n\n") {
            match stream.next().await {
                Some(Ok(chunk)) => received.extend_from_slice(&chunk),
                other => panic!("stream ended early: {other:?}"),
            }
        }
    })
    .await;
    assert!(
        first.is_ok(),
        "the first SSE event was not passed through before the upstream finished"
    );
    upstream.release();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("rest of the stream")
    {
        received.extend_from_slice(&chunk.unwrap());
    }
    let events = sse_data(&String::from_utf8_lossy(&received));
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(delta_text(&events), UPSTREAM_SSE_PIECES.concat());
}

async fn upstream_500_is_502(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, key) = app_with_upstream(backend, &upstream.base_url, 30).await;
    let reply = app.chat(Auth::Bearer(&key), &chat_body("up-500", "x")).await;
    reply.error(502, "upstream_error");
    assert!(!reply.text.contains(PROVIDER_KEY));
    // Tried gateway.max_attempts (3) times before the caller got anything.
    assert_eq!(upstream.requests().len(), 3);
    // Streaming request, upstream failing before the stream starts: also 502.
    let body =
        json!({"model": "up-500", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    app.chat(Auth::Bearer(&key), &body).await.error(502, "upstream_error");
}

async fn upstream_unreachable_is_502(backend: Backend) {
    let url = closed_port_url().await;
    let (app, key) = app_with_upstream(backend, &url, 30).await;
    let started = Instant::now();
    let reply = app.chat(Auth::Bearer(&key), &chat_body("up-json", "x")).await;
    reply.error(502, "upstream_error");
    assert!(!reply.text.contains(PROVIDER_KEY));
    assert!(started.elapsed() < Duration::from_secs(20));
}

async fn upstream_hang_is_504(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, key) = app_with_upstream(backend, &upstream.base_url, 1).await;
    let started = Instant::now();
    let reply = app.chat(Auth::Bearer(&key), &chat_body("up-hang", "x")).await;
    reply.error(504, "upstream_timeout");
    let elapsed = started.elapsed();
    // Three attempts (gateway.max_attempts), each waiting its 1 s for an answer's head.
    assert!(
        elapsed >= Duration::from_millis(2700) && elapsed < Duration::from_secs(15),
        "timed out after {elapsed:?}"
    );
    assert_eq!(upstream.requests().len(), 3);
}
