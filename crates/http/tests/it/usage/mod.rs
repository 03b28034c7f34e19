//! The usage ledger: every routed chat completion, streamed or not, is recorded
//! exactly once with the right tokens and outcome, nothing is lost when the database goes
//! away or the process dies, and the usage API reads it back.

use crate::common;

mod api;
mod binary;
mod kinds;
mod ledger;
mod outage;
mod recording;

use aigw_service::{PriceConfig, ProviderConfig, ProviderKind};
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// Models of the fake upstream routed by [`app_with_upstream`].
pub const UPSTREAM_MODELS: [&str; 7] =
    ["up-json", "up-nousage", "up-500", "up-hang", "up-slow", "up-break", "up-gated"];

/// `up-json`'s price: 1000 USD per million prompt tokens, 2000 per million completion tokens
/// (large, so that small token counts give visible costs).
pub const PRICE: PriceConfig = PriceConfig {
    input_per_million: 1000.0,
    output_per_million: 2000.0,
    image_tokens: None,
    cached_input_per_million: None,
    cache_write_per_million: None,
};

/// The cost of `prompt` and `completion` tokens of `up-json`, in USD.
pub fn cost_usd(prompt: u64, completion: u64) -> f64 {
    (prompt * 1_000_000_000 + completion * 2_000_000_000) as f64 / 1e6 / 1e6
}

/// An app routing [`UPSTREAM_MODELS`] to `base_url` (`up-json` priced at [`PRICE`]), with a
/// fast recorder, a user and one `ai_gateway` + `read` key. Returns (app, user, key, key id).
pub async fn app_with_upstream(
    backend: Backend,
    base_url: &str,
    tweak: impl FnOnce(&mut aigw_http::settings::Settings),
) -> (TestApp, User, String, String) {
    let base = base_url.to_owned();
    let app = spawn_app_with(backend, move |s| {
        s.providers = vec![ProviderConfig {
            name: "fake".into(),
            kind: ProviderKind::Openai,
            base_url: Some(base),
            api_key: Some(secrecy::SecretString::from("sk-provider".to_owned())),
            models: UPSTREAM_MODELS.iter().map(|m| (*m).to_owned()).collect(),
            tokenizers: Default::default(),
            prices: [("up-json".to_owned(), PRICE)].into_iter().collect(),
            ..ProviderConfig::default()
        }];
        s.usage.flush_interval_ms = 200;
        tweak(s);
    })
    .await;
    let user = app.new_user("usage").await;
    let created = app.create_key(&user.token, &["ai_gateway", "read"], None).await;
    let key = created["key"].as_str().unwrap().to_owned();
    let id = created["id"].as_str().unwrap().to_owned();
    (app, user, key, id)
}

/// Every usage record of the caller, newest first, read page by page.
pub async fn all_records(app: &TestApp, auth: Auth<'_>) -> Vec<Value> {
    let mut records = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/usage/requests?limit=200&cursor={c}"),
            None => "/api/v1/usage/requests?limit=200".to_owned(),
        };
        let data = app.get(&path, auth).await.data(200);
        records.extend(data["requests"].as_array().unwrap().iter().cloned());
        match data["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return records,
        }
    }
}

/// Polls (deadline 60 s) until the caller has at least `n` usage records; returns them.
pub async fn wait_for_records(app: &TestApp, auth: Auth<'_>, n: usize) -> Vec<Value> {
    let arrived = || async {
        let records = all_records(app, auth).await;
        if records.len() >= n {
            Ok(records)
        } else {
            Err(format!("only {} of {n} usage records arrived: {records:?}", records.len()))
        }
    };
    eventually("the usage records did not arrive", Duration::from_secs(60), arrived).await
}

/// Waits for the one record of request `request_id` and checks it is the only one.
pub async fn the_record(app: &TestApp, auth: Auth<'_>, request_id: &str) -> Value {
    let recorded = || async {
        let records = all_records(app, auth).await;
        let matching: Vec<&Value> =
            records.iter().filter(|r| r["request_id"] == json!(request_id)).collect();
        if let [record] = matching.as_slice() {
            return Ok((*record).clone());
        }
        assert!(matching.len() < 2, "more than one record for {request_id}: {records:?}");
        Err(records)
    };
    eventually(&format!("no usage record for {request_id}"), Duration::from_secs(60), recorded)
        .await
}

/// Asserts a record's outcome, tokens and `estimated` flag (tokens `None`: not checked).
pub fn assert_record(record: &Value, outcome: &str, tokens: Option<(u64, u64)>, estimated: bool) {
    assert_eq!(record["outcome"], json!(outcome), "{record}");
    assert_eq!(record["estimated"], json!(estimated), "{record}");
    let (p, c, t) = (
        record["prompt_tokens"].as_u64().unwrap(),
        record["completion_tokens"].as_u64().unwrap(),
        record["total_tokens"].as_u64().unwrap(),
    );
    assert_eq!(t, p + c, "{record}");
    if let Some((prompt, completion)) = tokens {
        assert_eq!((p, c), (prompt, completion), "{record}");
    }
    assert_timestamp(&record["started_at"]);
    assert!(record["latency_ms"].is_u64(), "{record}");
}
