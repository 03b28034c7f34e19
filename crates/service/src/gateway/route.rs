//! The second stage of a gateway call: the deployments that serve its model. Each provider
//! that lists a model in `[[providers]] models` is one deployment of it
//! ([`crate::gateway::deployment`]), and `echo` is served by the built-in model when
//! `gateway.echo_model` is on; a provider serves the endpoints (API dialects) its kind speaks
//! ([`ProviderKind::endpoints`]). The table is built once, at start-up, and its settings
//! checked then.

use crate::config::{GatewayConfig, ProviderConfig, ProviderKind};
use crate::error::ServiceError;
use crate::gateway::breaker::Breaker;
use crate::gateway::deployment::{Deployment, Route};
use crate::gateway::provider::{provider, Provider};
use aigw_domain::usage::Endpoint;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Name of the built-in model.
pub const ECHO_MODEL: &str = "echo";

/// Each model's route: its deployments and fallbacks.
pub(crate) type RouteTable = BTreeMap<String, Arc<Route>>;

/// The routing table of `providers`: each model's deployments (one per provider that lists
/// it), plus `echo` when `config.echo_model` is on, with the model's fallbacks.
///
/// # Errors
/// [`ServiceError::Internal`] naming the setting when an `openai` or `anthropic` provider
/// has no `base_url` (or not an http(s) one), its `api_key` or `anthropic_version` cannot be
/// a header, `upstream_models` names a model the provider does not list, every deployment of
/// a model weighs 0, a provider lists `echo` while the built-in model is on, a fallback names
/// a model nothing serves or makes a cycle, or `max_attempts` is out of range.
pub(crate) fn route_table(
    config: &GatewayConfig,
    providers: &[ProviderConfig],
) -> Result<RouteTable, ServiceError> {
    let bad = |m: String| Err(ServiceError::Internal(m));
    if !(1..=MAX_ATTEMPTS).contains(&config.max_attempts) {
        return bad(format!("gateway.max_attempts must be from 1 to {MAX_ATTEMPTS}"));
    }
    let mut deployments: BTreeMap<String, Vec<Arc<Deployment>>> = BTreeMap::new();
    if config.echo_model {
        deployments.insert(ECHO_MODEL.to_owned(), vec![echo_deployment(config)]);
    }
    for (slot, p) in providers.iter().enumerate() {
        let provider = Arc::new(provider(slot, p).map_err(ServiceError::Internal)?);
        for model in p.upstream_models.keys() {
            if !p.models.contains(model) {
                return bad(format!(
                    "provider {}: upstream_models.{model} names a model not in its models list",
                    p.name
                ));
            }
        }
        for model in &p.models {
            if config.echo_model && model == ECHO_MODEL {
                return bad(format!(
                    "provider {}: model {ECHO_MODEL} is the built-in model; set \
                     gateway.echo_model = false to route it to a provider",
                    p.name
                ));
            }
            let upstream = p.upstream_models.get(model).filter(|u| *u != model).cloned();
            let quota = (p.rpm_limit, p.tpm_limit);
            let breaker = Breaker::new(&config.breaker);
            let deployment =
                Deployment::new(provider.clone(), model, upstream, p.weight, quota, breaker);
            let of_model = deployments.entry(model.clone()).or_default();
            if of_model.iter().any(|d| d.provider.name == p.name) {
                return bad(format!("provider {}: model {model} is listed twice", p.name));
            }
            of_model.push(Arc::new(deployment));
        }
    }
    for (model, of_model) in &deployments {
        if of_model.iter().all(|d| d.weight == 0) {
            return bad(format!(
                "model {model}: every deployment has weight 0 ([[providers]] weight)"
            ));
        }
    }
    check_fallbacks("gateway.fallbacks", &config.fallbacks, &deployments)?;
    check_fallbacks(
        "gateway.context_window_fallbacks",
        &config.context_window_fallbacks,
        &deployments,
    )?;
    Ok(deployments
        .into_iter()
        .map(|(model, deployments)| {
            let route = route(config, &model, deployments);
            (model, Arc::new(route))
        })
        .collect())
}

/// The built-in model's one deployment.
fn echo_deployment(config: &GatewayConfig) -> Arc<Deployment> {
    let echo = Arc::new(Provider {
        name: ECHO_MODEL.to_owned(),
        kind: ProviderKind::Echo,
        targets: Vec::new(),
        credential: None,
        anthropic_version: None,
        count_tokens: None,
        direct: None,
    });
    let breaker = Breaker::new(&config.breaker);
    Arc::new(Deployment::new(echo, ECHO_MODEL, None, 1, (None, None), breaker))
}

/// The route of `model` over `deployments`, with its fallbacks from `config`.
fn route(config: &GatewayConfig, model: &str, deployments: Vec<Arc<Deployment>>) -> Route {
    let mut endpoints: Vec<Endpoint> = Vec::new();
    for d in &deployments {
        for e in d.provider.kind.endpoints() {
            if !endpoints.contains(e) {
                endpoints.push(*e);
            }
        }
    }
    Route {
        fallbacks: config.fallbacks.get(model).cloned().unwrap_or_default(),
        context_window_fallbacks: config
            .context_window_fallbacks
            .get(model)
            .cloned()
            .unwrap_or_default(),
        endpoints,
        model: model.to_owned(),
        deployments,
    }
}

/// The most attempts `gateway.max_attempts` may allow.
pub const MAX_ATTEMPTS: u32 = 10;

/// Checks the fallbacks of `setting`: each model named is routed, none falls back to
/// itself, and following them never comes back to a model already on the way.
///
/// # Errors
/// [`ServiceError::Internal`] naming the setting and the model.
fn check_fallbacks(
    setting: &str,
    fallbacks: &BTreeMap<String, Vec<String>>,
    routed: &BTreeMap<String, Vec<Arc<Deployment>>>,
) -> Result<(), ServiceError> {
    let bad = |m: String| Err(ServiceError::Internal(m));
    for (model, list) in fallbacks {
        if !routed.contains_key(model) {
            return bad(format!("{setting}.{model}: no provider serves {model}"));
        }
        for fallback in list {
            if !routed.contains_key(fallback) {
                return bad(format!("{setting}.{model}: no provider serves {fallback}"));
            }
        }
    }
    // A cycle: a path from a model back to itself (depth-first, each model's list in order).
    fn visit(
        model: &str,
        fallbacks: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
    ) -> Option<String> {
        if let Some(at) = path.iter().position(|m| m == model) {
            let mut cycle = path[at..].to_vec();
            cycle.push(model.to_owned());
            return Some(cycle.join(" → "));
        }
        path.push(model.to_owned());
        for next in fallbacks.get(model).into_iter().flatten() {
            if let Some(cycle) = visit(next, fallbacks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    for model in fallbacks.keys() {
        if let Some(cycle) = visit(model, fallbacks, &mut Vec::new()) {
            return bad(format!("{setting}: the fallbacks make a cycle: {cycle}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn provider(name: &str, models: &[&str]) -> ProviderConfig {
        ProviderConfig {
            name: name.to_owned(),
            base_url: Some(format!("http://{name}.example/v1")),
            models: models.iter().map(|m| (*m).to_owned()).collect(),
            ..ProviderConfig::default()
        }
    }

    fn refusal(config: &GatewayConfig, providers: &[ProviderConfig]) -> String {
        match route_table(config, providers) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_model_two_providers_list_has_a_deployment_at_each() {
        let providers = [provider("a", &["m"]), provider("b", &["m", "n"])];
        let routes = route_table(&GatewayConfig::default(), &providers).unwrap_or_default();
        let names: Vec<&str> = routes["m"].deployments.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["a/m", "b/m"]);
        assert_eq!(routes["n"].deployments.len(), 1);
        assert!(routes.contains_key(ECHO_MODEL));
    }

    #[test]
    fn every_deployment_weighing_zero_stops_the_start() {
        let mut a = provider("a", &["m"]);
        a.weight = 0;
        let mut b = provider("b", &["m"]);
        b.weight = 0;
        assert!(refusal(&GatewayConfig::default(), &[a.clone(), b]).contains("weight"));
        // One weighing more: fine.
        assert!(refusal(&GatewayConfig::default(), &[a, provider("c", &["m"])]).is_empty());
    }

    #[test]
    fn fallbacks_must_name_routed_models_and_make_no_cycle() {
        let providers = [provider("a", &["m", "n", "o"])];
        let with = |fallbacks: &[(&str, &[&str])]| GatewayConfig {
            fallbacks: fallbacks
                .iter()
                .map(|(m, to)| ((*m).to_owned(), to.iter().map(|t| (*t).to_owned()).collect()))
                .collect::<BTreeMap<_, _>>(),
            ..GatewayConfig::default()
        };
        assert!(refusal(&with(&[("m", &["n"]), ("n", &["o"])]), &providers).is_empty());
        let unknown = refusal(&with(&[("m", &["gone"])]), &providers);
        assert!(unknown.contains("gateway.fallbacks.m") && unknown.contains("gone"), "{unknown}");
        let cycle = refusal(&with(&[("m", &["n"]), ("n", &["o"]), ("o", &["m"])]), &providers);
        assert!(cycle.contains("cycle") && cycle.contains("m → n → o → m"), "{cycle}");
        assert!(refusal(&with(&[("m", &["m"])]), &providers).contains("cycle"));
    }

    #[test]
    fn bad_routing_settings_name_themselves() {
        let mut typo = provider("a", &["m"]);
        typo.upstream_models = BTreeMap::from([("n".to_owned(), "x".to_owned())]);
        assert!(refusal(&GatewayConfig::default(), &[typo]).contains("upstream_models.n"));
        let attempts = GatewayConfig { max_attempts: 0, ..GatewayConfig::default() };
        assert!(refusal(&attempts, &[]).contains("gateway.max_attempts"));
        let echo = refusal(&GatewayConfig::default(), &[provider("a", &["echo"])]);
        assert!(echo.contains("echo_model"), "{echo}");
        let twice = refusal(&GatewayConfig::default(), &[provider("a", &["m", "m"])]);
        assert!(twice.contains("listed twice"), "{twice}");
    }
}
