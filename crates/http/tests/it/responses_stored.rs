//! Stored responses of the Responses API, black box on both backends against the fake
//! upstream (`common::upstream_responses`): `GET` and `DELETE /api/v1/ai/responses/{id}` and
//! `GET /api/v1/ai/responses/{id}/input_items` pass through to the provider that created the
//! response, with the provider's key and the query unchanged, for the key that created it
//! only (on either of two nodes, right after the creation, plain or streamed); another key
//! of the same user or of another user, an unknown id and a deleted response get 404 and
//! nothing is sent upstream; a retrieval asking for a stream is 400; none is metered.

use crate::common::gateway_calls::records_of;
use crate::common::upstream::{FakeUpstream, Recorded};
use crate::common::*;
use aigw_http::settings::Settings;
use aigw_service::{ProviderConfig, ProviderKind};
use serde_json::{json, Value};

backend_tests!(
    stored_responses_are_passed_through_for_the_key_that_created_them_only,
    unknown_deleted_and_streamed_retrievals_are_refused,
);

/// The responses endpoint.
const PATH: &str = "/api/v1/ai/responses";

/// A node whose provider `oa` (at `upstream`, key `sk-provider`) serves `resp-bill`.
fn provider(upstream: &str) -> impl Fn(&mut Settings) + '_ {
    move |s: &mut Settings| {
        s.providers = vec![ProviderConfig {
            name: "oa".into(),
            kind: ProviderKind::Openai,
            base_url: Some(upstream.to_owned()),
            api_key: Some("sk-provider".to_owned().into()),
            models: vec!["resp-bill".to_owned()],
            ..ProviderConfig::default()
        }];
        s.usage.flush_interval_ms = 20;
    }
}

/// Creates a response with `key` on `app`; returns its id.
async fn create(app: &TestApp, key: &str) -> String {
    let reply =
        app.post(PATH, Auth::Bearer(key), &json!({"model": "resp-bill", "input": "hi"})).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.json()["id"].as_str().unwrap().to_owned()
}

/// Starts a streamed response with `key` on `app` and reads it up to the end of its first
/// event (`response.created`); returns its id and the response, still open.
async fn create_streamed(app: &TestApp, key: &str) -> (String, reqwest::Response) {
    let body = json!({"model": "resp-bill", "input": "hi", "stream": true});
    let mut response = app
        .request(reqwest::Method::POST, PATH, Auth::Bearer(key))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = response.chunk().await.unwrap().expect("the stream ended early");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let first = &text[..text.find("\n\n").unwrap()];
    assert!(first.starts_with("event: response.created"), "{text}");
    let data: Value = serde_json::from_str(first.split("data: ").nth(1).unwrap()).unwrap();
    (data["response"]["id"].as_str().unwrap().to_owned(), response)
}

/// The last request the upstream received.
fn last_sent(upstream: &FakeUpstream) -> Recorded {
    upstream.requests().last().cloned().unwrap()
}

/// Asserts that the upstream's last request was `method` to `path` with the provider's key.
fn assert_sent(upstream: &FakeUpstream, method: &str, path: &str) {
    let sent = last_sent(upstream);
    assert_eq!((sent.method.as_str(), sent.path.as_str()), (method, path));
    assert_eq!(sent.headers["authorization"], "Bearer sk-provider", "the provider's key");
    assert!(sent.body.is_empty(), "no body");
}

async fn stored_responses_are_passed_through_for_the_key_that_created_them_only(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let a = spawn_app_with(backend, provider(&upstream.base_url)).await;
    let b = a.spawn_sibling(provider(&upstream.base_url)).await;
    let user = a.new_user("stored").await;
    let key = a.key(&user.token, &["ai_gateway"]).await;
    let sibling_key = a.key(&user.token, &["ai_gateway"]).await;
    let other = a.new_user("stored-other").await;
    let other_key = a.key(&other.token, &["ai_gateway"]).await;

    // Plain: read back on the other node right after the creation.
    let plain = create(&a, &key).await;
    let reply = b.get(&format!("{PATH}/{plain}"), Auth::Bearer(&key)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["id"], plain.as_str(), "the provider's answer");
    assert_sent(&upstream, "GET", &format!("/responses/{plain}"));

    // Streamed: read back on the other node before the stream has been read further.
    let (streamed, rest) = create_streamed(&a, &key).await;
    let reply = b.get(&format!("{PATH}/{streamed}"), Auth::Bearer(&key)).await;
    assert_eq!(reply.status, 200, "recorded before response.created was passed on: {}", reply.text);
    assert_sent(&upstream, "GET", &format!("/responses/{streamed}"));
    let rest = rest.text().await.unwrap();
    assert!(rest.contains("response.completed"), "the stream went on: {rest}");

    let query = "after=msg_1&limit=2&order=asc&include%5B%5D=message.input_image.image_url";
    let reply = a.get(&format!("{PATH}/{plain}/input_items?{query}"), Auth::Bearer(&key)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["object"], "list");
    assert_sent(&upstream, "GET", &format!("/responses/{plain}/input_items?{query}"));
    let reply = b.get(&format!("{PATH}/{streamed}?include[]=x"), Auth::Bearer(&key)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_sent(&upstream, "GET", &format!("/responses/{streamed}?include[]=x"));

    // Any other key: 404, and nothing goes upstream.
    let sent = upstream.requests().len();
    for key in [&sibling_key, &other_key] {
        for id in [&plain, &streamed] {
            for node in [&a, &b] {
                let path = format!("{PATH}/{id}");
                node.get(&path, Auth::Bearer(key)).await.not_found("response", id);
                node.delete(&path, Auth::Bearer(key)).await.not_found("response", id);
                let items = format!("{path}/input_items");
                node.get(&items, Auth::Bearer(key)).await.not_found("response", id);
            }
        }
    }
    assert_eq!(upstream.requests().len(), sent, "nothing sent upstream for another key");
    let reply = a.get(&format!("{PATH}/{plain}"), Auth::Bearer(&key)).await;
    assert_eq!(reply.status, 200, "still there for its key: {}", reply.text);

    // Retrievals are not metered: the two creations only.
    let records = records_of(&a, &[&user, &other], 2).await;
    assert!(records.iter().all(|r| r["model"] == "resp-bill"), "{records:?}");
    drop(b);
}

async fn unknown_deleted_and_streamed_retrievals_are_refused(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let a = spawn_app_with(backend, provider(&upstream.base_url)).await;
    let b = a.spawn_sibling(provider(&upstream.base_url)).await;
    let user = a.new_user("stored-gone").await;
    let key = a.key(&user.token, &["ai_gateway"]).await;
    let id = create(&a, &key).await;

    let sent = upstream.requests().len();
    // Known to the provider, but not created through the gateway; not an id at all.
    a.get(&format!("{PATH}/resp_999999"), Auth::Bearer(&key))
        .await
        .not_found("response", "resp_999999");
    a.get(&format!("{PATH}/..%2Fchat"), Auth::Bearer(&key)).await.error(404, "not_found");
    a.delete(&format!("{PATH}/resp_999999"), Auth::Bearer(&key)).await.error(404, "not_found");
    for query in ["stream=true", "include[]=x&stream=1"] {
        a.get(&format!("{PATH}/{id}?{query}"), Auth::Bearer(&key)).await.invalid("stream");
    }
    assert_eq!(upstream.requests().len(), sent, "nothing sent upstream");
    let reply = a.get(&format!("{PATH}/{id}?stream=false"), Auth::Bearer(&key)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    // Deleted on one node: gone on both, and nothing more is sent upstream.
    let reply = a.delete(&format!("{PATH}/{id}"), Auth::Bearer(&key)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json(), json!({"id": id, "object": "response", "deleted": true}));
    assert_sent(&upstream, "DELETE", &format!("/responses/{id}"));
    let sent = upstream.requests().len();
    for node in [&a, &b] {
        node.get(&format!("{PATH}/{id}"), Auth::Bearer(&key)).await.not_found("response", &id);
        node.delete(&format!("{PATH}/{id}"), Auth::Bearer(&key)).await.not_found("response", &id);
    }
    assert_eq!(upstream.requests().len(), sent, "nothing sent upstream once deleted");

    // An access token is not a key: never the owner.
    a.get(&format!("{PATH}/{id}"), Auth::Bearer(&user.token)).await.error(403, "forbidden");
    drop(b);
}
