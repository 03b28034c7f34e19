//! One record per routed call, with the right tokens and outcome, streamed or not.

use super::*;
use common::upstream::{
    default_stream, FakeUpstream, STREAM_USAGE, UPSTREAM_JSON, UPSTREAM_JSON_NO_USAGE,
};
use futures_util::StreamExt;

backend_tests!(
    non_streamed_call_is_recorded,
    streamed_call_is_recorded_and_the_usage_it_did_not_ask_for_is_hidden,
    streamed_call_with_caller_usage_gets_it_unchanged,
    upstream_without_usage_is_estimated,
    cancelled_stream_is_recorded_as_client_cancelled,
    upstream_errors_are_recorded,
    echo_is_metered_with_tokenizer_counts,
    thousand_concurrent_calls_give_a_thousand_records,
);

/// "hello world" as the one user message: 3 + 3 + 1 ("user") + 2 tokens in OpenAI's chat
/// format (cl100k_base), what OpenAI reports as prompt_tokens for it.
const HELLO_PROMPT_TOKENS: u64 = 9;

fn request_id(reply: &Reply) -> String {
    reply.header("x-request-id").unwrap().to_owned()
}

async fn non_streamed_call_is_recorded(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, user, key, key_id) = app_with_upstream(backend, &upstream.base_url, |_| {}).await;
    let reply = app.chat(Auth::Bearer(&key), &chat_body("up-json", "hello world")).await;
    assert_eq!(reply.text, UPSTREAM_JSON, "the answer is the upstream's, unchanged");
    let id = request_id(&reply);
    let record = the_record(&app, Auth::Bearer(&user.token), &id).await;
    assert_record(&record, "ok", Some((3, 2)), false);
    assert_eq!(record["api_key_id"], json!(key_id));
    assert_eq!(record["model"], json!("up-json"));
    assert_eq!(record["provider"], json!("fake"));
    assert_eq!(record["streamed"], json!(false));
    assert_eq!(record["endpoint"], json!("chat"));
    for kind in ["cached_tokens", "cache_write_tokens", "reasoning_tokens"] {
        assert_eq!(record[kind], json!(0), "{kind}: {record}");
    }
    assert_eq!(record["priced"], json!(true));
    assert_eq!(record["cost_usd"], json!(cost_usd(3, 2)));
    assert!(record.get("user_id").is_none(), "the caller's own id is not repeated: {record}");

    // The rollups say the same, grouped each way, and so does the key object.
    for group in ["day", "model", "api_key", "endpoint"] {
        let data =
            app.get(&format!("/api/v1/usage?group_by={group}"), Auth::Bearer(&key)).await.data(200);
        assert_eq!(data["group_by"], json!(group));
        let rows = data["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{data}");
        let row = &rows[0];
        let field = if group == "api_key" { "api_key_id" } else { group };
        assert!(row[field].is_string(), "{row}");
        for (k, v) in [
            ("requests", 1),
            ("prompt_tokens", 3),
            ("completion_tokens", 2),
            ("total_tokens", 5),
            ("estimated_requests", 0),
            ("cached_tokens", 0),
            ("reasoning_tokens", 0),
        ] {
            assert_eq!(row[k], json!(v), "{k}: {row}");
            assert_eq!(data["totals"][k], json!(v), "{k}: {data}");
        }
        assert_eq!(row["cost_usd"], json!(cost_usd(3, 2)));
        assert_eq!(row["priced"], json!(true));
    }
    let keys = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    let usage = &keys["api_keys"][0]["usage_30d"];
    assert_eq!(usage, &json!({"requests": 1, "total_tokens": 5, "cost_usd": cost_usd(3, 2)}));
}

/// The caller sent no `stream_options`: aigw asks the upstream for usage and hides what that
/// adds, so the caller gets byte for byte the stream the upstream sends without it.
async fn streamed_call_is_recorded_and_the_usage_it_did_not_ask_for_is_hidden(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, user, key, _) = app_with_upstream(backend, &upstream.base_url, |_| {}).await;
    let body = json!({"model": "up-json", "stream": true, "messages": [{"role": "user", "content": "hello world"}]});
    let reply = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.text, default_stream("up-json", false).concat());
    let sent: Value = serde_json::from_slice(&upstream.requests()[0].body).unwrap();
    assert_eq!(sent["stream_options"], json!({"include_usage": true}), "{sent}");
    let record = the_record(&app, Auth::Bearer(&user.token), &request_id(&reply)).await;
    assert_record(&record, "ok", Some((STREAM_USAGE.0, STREAM_USAGE.1)), false);
    assert_eq!(record["streamed"], json!(true));
    assert_eq!(record["cost_usd"], json!(cost_usd(STREAM_USAGE.0, STREAM_USAGE.1)));
}

async fn streamed_call_with_caller_usage_gets_it_unchanged(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, user, key, _) = app_with_upstream(backend, &upstream.base_url, |_| {}).await;
    let raw = r#"{"model":"up-json","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello world"}]}"#;
    let reply = app.post_raw("/api/v1/ai/chat/completions", Auth::Bearer(&key), raw).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.text, default_stream("up-json", true).concat(), "usage chunk passed through");
    assert_eq!(String::from_utf8_lossy(&upstream.requests()[0].body), raw, "body unchanged");
    let record = the_record(&app, Auth::Bearer(&user.token), &request_id(&reply)).await;
    assert_record(&record, "ok", Some((STREAM_USAGE.0, STREAM_USAGE.1)), false);
    // A caller asking `include_usage: false` is asked for usage upstream, and sees none.
    let body = json!({"model": "up-json", "stream": true, "stream_options": {"include_usage": false},
        "messages": [{"role": "user", "content": "hello world"}]});
    let reply = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(reply.text, default_stream("up-json", false).concat());
    let record = the_record(&app, Auth::Bearer(&user.token), &request_id(&reply)).await;
    assert_record(&record, "ok", Some((STREAM_USAGE.0, STREAM_USAGE.1)), false);
}

async fn upstream_without_usage_is_estimated(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, user, key, _) = app_with_upstream(backend, &upstream.base_url, |_| {}).await;
    let reply = app.chat(Auth::Bearer(&key), &chat_body("up-nousage", "hello world")).await;
    assert_eq!(reply.text, UPSTREAM_JSON_NO_USAGE);
    let record = the_record(&app, Auth::Bearer(&user.token), &request_id(&reply)).await;
    // The answer "hello world" is 2 tokens.
    assert_record(&record, "ok", Some((HELLO_PROMPT_TOKENS, 2)), true);
    assert_eq!(record["priced"], json!(false));
    assert_eq!(record["cost_usd"], json!(0.0));
    // A stream from an upstream that ignores include_usage: "Hello stream!" is 3 tokens.
    let body = json!({"model": "up-nousage", "stream": true, "messages": [{"role": "user", "content": "hello world"}]});
    let reply = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(reply.text, default_stream("up-nousage", false).concat());
    let record = the_record(&app, Auth::Bearer(&user.token), &request_id(&reply)).await;
    assert_record(&record, "ok", Some((HELLO_PROMPT_TOKENS, 3)), true);
    let data = app.get("/api/v1/usage?group_by=model", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(data["rows"][0]["model"], json!("up-nousage"));
    assert_eq!(data["rows"][0]["estimated_requests"], json!(2));
    assert_eq!(data["rows"][0]["priced"], json!(false));
}

/// The client reads the first event of a slow stream and hangs up.
async fn cancelled_stream_is_recorded_as_client_cancelled(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, user, key, _) = app_with_upstream(backend, &upstream.base_url, |_| {}).await;
    let body = json!({"model": "up-slow", "stream": true, "messages": [{"role": "user", "content": "hello world"}]});
    let response = app
        .request(reqwest::Method::POST, "/api/v1/ai/chat/completions", Auth::Bearer(&key))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let mut stream = response.bytes_stream();
    let mut received = String::new();
    while received.matches("\n\n").count() < 3 {
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap();
        received.push_str(&String::from_utf8_lossy(&chunk.unwrap().unwrap()));
    }
    drop(stream);
    let record = the_record(&app, Auth::Bearer(&user.token), &id).await;
    assert_record(&record, "client_cancelled", None, true);
    assert_eq!(record["prompt_tokens"], json!(HELLO_PROMPT_TOKENS));
    let completion = record["completion_tokens"].as_u64().unwrap();
    assert!(
        completion >= 2 && completion < 2 * common::upstream::SLOW_PIECES as u64,
        "what was streamed before the hang-up, estimated: {record}"
    );
}

async fn upstream_errors_are_recorded(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, user, key, _) =
        app_with_upstream(backend, &upstream.base_url, |s| s.gateway.upstream_timeout_secs = 1)
            .await;
    let auth = Auth::Bearer(&user.token);
    // A 500 before any answer: nothing generated, no tokens.
    let reply = app.chat(Auth::Bearer(&key), &chat_body("up-500", "hello world")).await;
    reply.error(502, "upstream_error");
    let record = the_record(&app, auth, &request_id(&reply)).await;
    assert_record(&record, "upstream_error", Some((0, 0)), false);
    // No answer in time: the prompt was sent, estimated.
    let reply = app.chat(Auth::Bearer(&key), &chat_body("up-hang", "hello world")).await;
    reply.error(504, "upstream_timeout");
    let record = the_record(&app, auth, &request_id(&reply)).await;
    assert_record(&record, "timeout", Some((HELLO_PROMPT_TOKENS, 0)), true);
    // A stream broken midway: what came, estimated.
    let body = json!({"model": "up-break", "stream": true, "messages": [{"role": "user", "content": "hello world"}]});
    let response = app
        .request(reqwest::Method::POST, "/api/v1/ai/chat/completions", Auth::Bearer(&key))
        .json(&body)
        .send()
        .await
        .unwrap();
    let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let _ = response.bytes().await;
    let record = the_record(&app, auth, &id).await;
    assert_record(&record, "upstream_error", None, true);
    assert_eq!(record["prompt_tokens"], json!(HELLO_PROMPT_TOKENS));
    assert!(record["completion_tokens"].as_u64().unwrap() >= 1, "{record}");
    assert_eq!(all_records(&app, auth).await.len(), 3);
}

async fn echo_is_metered_with_tokenizer_counts(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, user, key, _) = app_with_upstream(backend, &upstream.base_url, |_| {}).await;
    let reply = app.chat(Auth::Bearer(&key), &chat_body("echo", "hello world")).await;
    let usage = &reply.json()["usage"];
    assert_eq!(
        usage,
        &json!({"prompt_tokens": HELLO_PROMPT_TOKENS, "completion_tokens": 2, "total_tokens": 11})
    );
    let record = the_record(&app, Auth::Bearer(&user.token), &request_id(&reply)).await;
    assert_record(&record, "ok", Some((HELLO_PROMPT_TOKENS, 2)), false);
    assert_eq!(record["provider"], json!("echo"));
    // Streamed without stream_options: no usage chunk reaches the caller, yet it is counted.
    let body = json!({"model": "echo", "stream": true, "messages": [{"role": "user", "content": "hello world"}]});
    let reply = app.chat(Auth::Bearer(&key), &body).await;
    assert!(!reply.text.contains("usage"), "{}", reply.text);
    assert!(reply.text.ends_with("data: [DONE]\n\n"));
    let record = the_record(&app, Auth::Bearer(&user.token), &request_id(&reply)).await;
    assert_record(&record, "ok", Some((HELLO_PROMPT_TOKENS, 2)), false);
    // Asked for: the last chunk before [DONE] has empty choices and the usage.
    let body = json!({"model": "echo", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "hello world"}]});
    let reply = app.chat(Auth::Bearer(&key), &body).await;
    let events: Vec<&str> = reply.text.split("\n\n").filter(|e| !e.is_empty()).collect();
    let last: Value =
        serde_json::from_str(events[events.len() - 2].trim_start_matches("data: ")).unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["total_tokens"], json!(11));
    the_record(&app, Auth::Bearer(&user.token), &request_id(&reply)).await;
}

/// 1,000 calls at once (half streamed): 1,000 records, one per request id, and rollups that
/// sum to them.
async fn thousand_concurrent_calls_give_a_thousand_records(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    // Up to 1,000 connections from 127.0.0.1: past the per-address caps.
    let (app, user, key, _) = app_with_upstream(backend, &upstream.base_url, |s| {
        s.server.max_connections_per_address = 0;
        s.server.max_pending_requests_per_address = 0;
    })
    .await;
    let app = std::sync::Arc::new(app);
    let calls = (0..1000).map(|i| {
        let (app, key) = (app.clone(), key.clone());
        tokio::spawn(async move {
            let text = format!("call number {i}");
            let body = json!({"model": "echo", "stream": i % 2 == 0,
                "messages": [{"role": "user", "content": text}]});
            let reply = app.chat(Auth::Bearer(&key), &body).await;
            assert_eq!(reply.status, 200, "{}", reply.text);
            request_id(&reply)
        })
    });
    let mut ids: Vec<String> =
        futures_util::future::join_all(calls).await.into_iter().map(Result::unwrap).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 1000);
    let auth = Auth::Bearer(&user.token);
    let records = wait_for_records(&app, auth, 1000).await;
    let mut recorded: Vec<String> =
        records.iter().map(|r| r["request_id"].as_str().unwrap().to_owned()).collect();
    recorded.sort();
    assert_eq!(recorded, ids, "exactly the calls made, once each");
    let sum = |k: &str| records.iter().map(|r| r[k].as_u64().unwrap()).sum::<u64>();
    let streamed = records.iter().filter(|r| r["streamed"] == json!(true)).count();
    assert_eq!(streamed, 500);
    assert!(records.iter().all(|r| r["outcome"] == json!("ok") && r["estimated"] == json!(false)));
    for group in ["day", "model", "api_key"] {
        let data = app.get(&format!("/api/v1/usage?group_by={group}"), auth).await.data(200);
        let rows = data["rows"].as_array().unwrap();
        for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
            let rows_sum: u64 = rows.iter().map(|r| r[k].as_u64().unwrap()).sum();
            assert_eq!(rows_sum, sum(k), "{group} {k}: {data}");
            assert_eq!(data["totals"][k], json!(sum(k)));
        }
        let requests: u64 = rows.iter().map(|r| r["requests"].as_u64().unwrap()).sum();
        assert_eq!(requests, 1000, "{data}");
    }
}
