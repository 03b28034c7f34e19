//! `POST /api/v1/ai/embeddings`, black box on both backends against the fake upstream's
//! `/embeddings` (`common::upstream_embeddings`, which bills one token per byte of the input):
//! the answer passed through, the call metered from `usage.prompt_tokens` with the endpoint
//! in the ledger; bad input refused naming the field, before anything goes upstream; a model
//! whose provider serves no embeddings refused naming `model`; and 200 concurrent calls over
//! two nodes on a budget worth 20 at the key's, the member's and the team's level.

use crate::common::gateway_calls::{cost_of, fire_at, records_of};
use crate::common::upstream::FakeUpstream;
use crate::common::upstream_embeddings::billed_input;
use crate::common::*;
use aigw_http::settings::Settings;
use aigw_service::{PriceConfig, ProviderConfig, ProviderKind};
use serde_json::{json, Value};
use std::collections::BTreeMap;

backend_tests!(
    embeddings_are_passed_through_and_metered,
    bad_embeddings_input_is_refused_naming_the_field,
    models_name_their_endpoints_and_are_retrieved,
    embeddings_budgets_hold_at_every_level_over_two_nodes,
);

/// USD per million input tokens of `emb-bill`.
const USD_PER_MILLION: f64 = 1000.0;

/// A node whose provider `emb` (at `upstream`) serves `emb-bill`, `emb-nousage` and `emb-400`
/// (priced at [`USD_PER_MILLION`] per input token), and the built-in `echo` (chat only).
fn embedding_provider(upstream: &str) -> impl Fn(&mut Settings) + '_ {
    move |s: &mut Settings| {
        let price = PriceConfig {
            input_per_million: USD_PER_MILLION,
            output_per_million: USD_PER_MILLION,
            ..PriceConfig::default()
        };
        s.providers = vec![ProviderConfig {
            name: "emb".into(),
            kind: ProviderKind::Openai,
            base_url: Some(upstream.to_owned()),
            api_key: Some("sk-provider".to_owned().into()),
            models: vec!["emb-bill".into(), "emb-nousage".into(), "emb-400".into()],
            tokenizers: BTreeMap::new(),
            prices: BTreeMap::from([
                ("emb-bill".to_owned(), price),
                ("emb-nousage".to_owned(), price),
            ]),
            ..ProviderConfig::default()
        }];
        s.usage.flush_interval_ms = 20;
        s.usage.request_records = aigw_service::usage::config::RequestRecords::Database;
    }
}

/// The embeddings endpoint.
const PATH: &str = "/api/v1/ai/embeddings";

/// Posts `body` to the embeddings endpoint of `app` with `key`.
async fn embed(app: &TestApp, key: &str, body: &Value) -> Reply {
    app.post(PATH, Auth::Bearer(key), body).await
}

async fn embeddings_are_passed_through_and_metered(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, embedding_provider(&upstream.base_url)).await;
    let user = app.new_user("emb").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let inputs = [json!("hello world"), json!(["ab", "cde"]), json!([[1, 2, 3], [4]])];
    for input in &inputs {
        let body = json!({"model": "emb-bill", "input": input, "dimensions": 3,
                          "encoding_format": "float", "user": "u-1"});
        let reply = embed(&app, &key, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let answer = reply.json();
        assert_eq!(answer["object"], "list");
        assert_eq!(answer["usage"]["prompt_tokens"], billed_input(&body));
        let sent = upstream.requests().last().cloned().unwrap();
        assert_eq!(sent.path, "/embeddings");
        assert_eq!(sent.headers["authorization"], "Bearer sk-provider");
        assert_eq!(serde_json::from_slice::<Value>(&sent.body).unwrap(), body, "passed through");
    }
    let without_usage = embed(&app, &key, &json!({"model": "emb-nousage", "input": "hello"})).await;
    assert_eq!(without_usage.status, 200, "{}", without_usage.text);
    let refused = embed(&app, &key, &json!({"model": "emb-400", "input": "x"})).await;
    assert_eq!(
        refused.error(400, "upstream_rejected")["message"],
        "This model's maximum context length is 8192 tokens"
    );
    let found = records_of(&app, &[&user], 5).await;
    for record in &found {
        assert_eq!(record["streamed"], false, "{record}");
        assert_eq!(record["endpoint"], "embeddings", "{record}");
    }
    let billed: Vec<u64> = inputs.iter().map(|i| billed_input(&json!({"input": i}))).collect();
    for (tokens, record) in billed.iter().zip(found.iter().rev()) {
        assert_eq!(record["prompt_tokens"].as_u64(), Some(*tokens), "{record}");
        assert_eq!(record["completion_tokens"], 0);
        assert_eq!(record["estimated"], false);
        let cost = *tokens as f64 * USD_PER_MILLION / 1e6;
        assert!((record["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-9, "{record}");
    }
    let estimated = &found[1];
    assert_eq!(estimated["model"], "emb-nousage");
    assert_eq!(estimated["estimated"], true, "no usage: counted with the tokenizer");
    assert!(estimated["prompt_tokens"].as_u64().unwrap() >= 1, "{estimated}");
    assert_eq!(found[0]["outcome"], "upstream_error");
}

async fn bad_embeddings_input_is_refused_naming_the_field(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, embedding_provider(&upstream.base_url)).await;
    let user = app.new_user("emb-bad").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    for (body, field) in [
        (json!({"input": "x"}), "model"),
        (json!({"model": "emb-bill"}), "input"),
        (json!({"model": "emb-bill", "input": ""}), "input"),
        (json!({"model": "emb-bill", "input": []}), "input"),
        (json!({"model": "emb-bill", "input": {"text": "x"}}), "input"),
        (json!({"model": "emb-bill", "input": ["a", 1]}), "input[1]"),
        (json!({"model": "emb-bill", "input": [[1], []]}), "input[1]"),
        (json!({"model": "emb-bill", "input": "x", "dimensions": 0}), "dimensions"),
        (json!({"model": "emb-bill", "input": "x", "encoding_format": "int8"}), "encoding_format"),
        (json!({"model": "echo", "input": "x"}), "model"),
    ] {
        let reply = embed(&app, &key, &body).await;
        reply.invalid(field);
    }
    let not_chat = app.chat(Auth::Bearer(&key), &chat_body("emb-bill", "hi")).await;
    assert_eq!(not_chat.status, 200, "an openai provider serves chat too: {}", not_chat.text);
    let unknown = embed(&app, &key, &json!({"model": "nope", "input": "x"})).await;
    unknown.not_found("model", "nope");
    let paths: Vec<String> = upstream.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/chat/completions"], "nothing refused went upstream");
    let reply = app
        .post("/api/v1/ai/embeddings", Auth::None, &json!({"model": "emb-bill", "input": "x"}))
        .await;
    reply.unauthorized();
    let token_only = app.post("/api/v1/ai/embeddings", Auth::Bearer(&user.token), &json!({})).await;
    assert_eq!(token_only.status, 403, "{}", token_only.text);
}

async fn models_name_their_endpoints_and_are_retrieved(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, embedding_provider(&upstream.base_url)).await;
    let user = app.new_user("models").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let list = app.get("/api/v1/ai/models", Auth::Bearer(&key)).await;
    assert_eq!(list.status, 200, "{}", list.text);
    let data = list.json()["data"].clone();
    let echo = data.as_array().unwrap().iter().find(|m| m["id"] == "echo").cloned().unwrap();
    assert_eq!(echo["endpoints"], json!(["chat"]));
    let one = app.get("/api/v1/ai/models/emb-bill", Auth::Bearer(&key)).await;
    assert_eq!(one.status, 200, "{}", one.text);
    assert_eq!(one.json()["id"], "emb-bill");
    assert_eq!(one.json()["object"], "model");
    assert_eq!(one.json()["endpoints"], json!(["chat", "embeddings", "responses"]));
    app.get("/api/v1/ai/models/nope", Auth::Bearer(&key)).await.not_found("model", "nope");
    let limited = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "l", "permissions": ["ai_gateway"], "allowed_models": ["echo"]}),
        )
        .await
        .data(201)["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let hidden = app.get("/api/v1/ai/models/emb-bill", Auth::Bearer(&limited)).await;
    hidden.not_found("model", "emb-bill");
    let nested = app.get("/api/v1/ai/models/vendor/model", Auth::Bearer(&key)).await;
    nested.not_found("model", "vendor/model");
    let nul = app.get("/api/v1/ai/models/a%00", Auth::Bearer(&key)).await;
    assert_eq!(nul.invalid("model")["details"]["issue"], aigw_domain::validation::NUL_ISSUE);
}

/// A body of `emb-bill` billed `tokens` input tokens.
fn embedding_of(tokens: usize) -> Value {
    json!({"model": "emb-bill", "input": "x".repeat(tokens)})
}

/// 200 calls of 500 input tokens ($0.50 each) over two nodes at once, on a budget of $10.00
/// (twenty calls) at each level in turn: the key's, the member's, the team's. At most twenty
/// pass, every refusal names the level, and the ledger's spend stays within the budget.
async fn embeddings_budgets_hold_at_every_level_over_two_nodes(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let a = spawn_app_with(backend, embedding_provider(&upstream.base_url)).await;
    let b = a.spawn_sibling(embedding_provider(&upstream.base_url)).await;
    let body = embedding_of(500);
    let budget = 20.0 * 500.0 * USD_PER_MILLION / 1e6;

    let user = a.new_user("emb-key").await;
    let made = a
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "k", "permissions": ["ai_gateway", "read"], "max_budget_usd": budget}),
        )
        .await
        .data(201);
    let key = made["key"].as_str().unwrap().to_owned();
    let (ok, scopes) = fire_at([&a, &b], PATH, &[key], &body, 200).await;
    assert!((10..=20).contains(&ok), "key: {ok} calls of $0.50 in ${budget}");
    assert!(scopes.iter().all(|s| s == "key"), "{scopes:?}");
    let key_spent = cost_of(&records_of(&a, &[&user], ok).await);
    assert!(key_spent <= budget + 1e-9, "the key spent ${key_spent:.4} of ${budget}");

    for (level, team_body) in [
        ("member", json!({"name": "m", "max_budget_usd": 1000.0, "member_budget_usd": budget})),
        ("team", json!({"name": "t", "max_budget_usd": budget})),
    ] {
        let owner = a.new_user(&format!("emb-{level}")).await;
        let team = a.post("/api/v1/teams", Auth::Bearer(&owner.token), &team_body).await.data(201);
        let id = team["id"].as_str().unwrap();
        let scoped = json!({"name": "s", "permissions": ["ai_gateway", "read"], "team_id": id});
        let mut made = Vec::new();
        for _ in 0..2 {
            let key = a.create_key_raw(Auth::Bearer(&owner.token), &scoped).await.data(201);
            made.push(key["key"].as_str().unwrap().to_owned());
        }
        let (ok, scopes) = fire_at([&a, &b], PATH, &made, &body, 200).await;
        assert!((10..=20).contains(&ok), "{level}: {ok} calls of $0.50 in ${budget}");
        assert!(scopes.iter().all(|s| s == level), "{level}: {scopes:?}");
        let level_spent = cost_of(&records_of(&a, &[&owner], ok).await);
        assert!(level_spent <= budget + 1e-9, "{level}: spent ${level_spent:.4} of ${budget}");
    }
}
