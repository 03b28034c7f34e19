//! Routing across deployments against upstreams that fail on demand
//! ([`crate::common::flaky_upstream`]): retries before the caller received anything, circuit
//! breakers per deployment and node, and fallback models, with the ledger naming what served.

mod breakers;
mod fallbacks;
mod retries;

use crate::common::flaky_upstream::{FlakyUpstream, FLAKY_USAGE};
use crate::common::*;
use aigw_service::config::PriceConfig;
use aigw_service::{BreakerConfig, ProviderConfig, ProviderKind};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A provider at `upstream` (named as it is) serving `models` with `weight`.
pub(crate) fn deployment(upstream: &FlakyUpstream, models: &[&str], weight: u32) -> ProviderConfig {
    ProviderConfig {
        name: upstream.name.clone(),
        kind: ProviderKind::Openai,
        base_url: Some(upstream.base_url.clone()),
        models: models.iter().map(|m| (*m).to_owned()).collect(),
        weight,
        ..ProviderConfig::default()
    }
}

/// `provider` with `model` priced at `input` and `output` USD per million tokens.
pub(crate) fn priced(
    mut provider: ProviderConfig,
    model: &str,
    input: f64,
    output: f64,
) -> ProviderConfig {
    provider.prices = BTreeMap::from([(
        model.to_owned(),
        PriceConfig {
            input_per_million: input,
            output_per_million: output,
            ..PriceConfig::default()
        },
    )]);
    provider
}

/// A breaker that opens after `failures` failures in a row (no ratio) for `cooldown_secs`.
pub(crate) fn breaker(failures: u32, cooldown_secs: u64) -> BreakerConfig {
    BreakerConfig { failures, failure_ratio: 0.0, cooldown_secs, ..BreakerConfig::default() }
}

/// The cost in USD of a healthy answer ([`FLAKY_USAGE`]) at `input` and `output` USD per
/// million tokens.
pub(crate) fn cost_at(input: f64, output: f64) -> f64 {
    let (prompt, completion, _) = FLAKY_USAGE;
    (prompt as f64 * input + completion as f64 * output) / 1_000_000.0
}

/// The answer's `x-aigw-deployment` and `x-aigw-attempts`.
pub(crate) fn served(reply: &Reply) -> (String, u32) {
    let deployment = reply.header("x-aigw-deployment").unwrap_or_default().to_owned();
    let attempts = reply.header("x-aigw-attempts").and_then(|a| a.parse().ok()).unwrap_or(0);
    (deployment, attempts)
}

/// The text of a chat answer's message.
pub(crate) fn content(reply: &Reply) -> String {
    reply.json()["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_owned()
}

/// A user and a key with `ai_gateway` on `app`; `policy` adds to the key's body.
pub(crate) async fn caller(app: &TestApp, tag: &str, policy: Value) -> (User, String) {
    let user = app.new_user(tag).await;
    let mut body = json!({"name": tag, "permissions": ["ai_gateway", "read"]});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), policy.as_object()) {
        body.extend(extra.clone());
    }
    let key = app.create_key_raw(Auth::Bearer(&user.token), &body).await.data(201);
    let secret = key["key"].as_str().unwrap_or_default().to_owned();
    (user, secret)
}
