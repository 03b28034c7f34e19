//! The second stage of a gateway call: the provider that serves its model. Each model of
//! `[[providers]] models` is served by its one provider, and `echo` by the built-in model
//! when `gateway.echo_model` is on; a provider serves the endpoints (API dialects) its kind
//! speaks ([`ProviderKind::endpoints`]). What a call reuses (the provider's URL of each
//! endpoint, its key as a header, how a direct connection addresses it) is built here once,
//! at start-up.

use crate::config::{GatewayConfig, ProviderConfig, ProviderKind};
use crate::error::ServiceError;
use aigw_domain::usage::Endpoint;
use aigw_domain::FieldError;
use secrecy::ExposeSecret;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Name of the built-in model.
pub const ECHO_MODEL: &str = "echo";

/// Each model's provider.
pub(crate) type RouteTable = BTreeMap<String, Arc<Provider>>;

/// A provider a model is routed to, as configured (`[[providers]]`), with what every call
/// to it reuses.
#[derive(Debug)]
pub(crate) struct Provider {
    /// Its `name`.
    pub(crate) name: String,
    /// Its `kind`.
    pub(crate) kind: ProviderKind,
    /// The upstream URL of each endpoint it serves (`{base_url}/chat/completions`, …),
    /// built and parsed once (none for `echo`).
    pub(crate) targets: Vec<Target>,
    /// `Bearer <api_key>`, built once and marked sensitive (never logged).
    pub(crate) authorization: Option<http::HeaderValue>,
    /// How direct calls address it (`None` for `echo`).
    pub(crate) direct: Option<DirectTarget>,
}

/// Where one endpoint of a provider is called.
#[derive(Debug)]
pub(crate) struct Target {
    /// The endpoint.
    pub(crate) endpoint: Endpoint,
    /// Its absolute URL (`{base_url}/chat/completions`, …).
    pub(crate) url: http::Uri,
    /// The URL's path and query: the request target of a direct call (RFC 9112 3.2.1).
    pub(crate) origin_form: http::Uri,
}

impl Target {
    /// The target of `endpoint` at `{base_url}{path}`.
    fn new(endpoint: Endpoint, base_url: &str, path: &str) -> Result<Self, String> {
        let url = format!("{}{path}", base_url.trim_end_matches('/'));
        // Checked as a URL first (the error texts of `url` name the fault), then kept as the
        // `Uri` every call uses.
        let parsed = reqwest::Url::parse(&url).map_err(|e| e.to_string())?;
        let url = parsed.as_str().parse::<http::Uri>().map_err(|e| e.to_string())?;
        let origin_form = url
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned())
            .parse::<http::Uri>()
            .map_err(|e| e.to_string())?;
        Ok(Self { endpoint, url, origin_form })
    }

    /// The absolute URL and the origin form of `suffix` below this target (a path and its
    /// query: `/resp_1/input_items?limit=2`); the target's own for an empty `suffix`.
    ///
    /// # Errors
    /// The parser's message when the URL with `suffix` is not a valid URI.
    pub(crate) fn below(&self, suffix: &str) -> Result<(http::Uri, http::Uri), String> {
        if suffix.is_empty() {
            return Ok((self.url.clone(), self.origin_form.clone()));
        }
        let parse = |base: &http::Uri| {
            format!("{base}{suffix}").parse::<http::Uri>().map_err(|e| e.to_string())
        };
        Ok((parse(&self.url)?, parse(&self.origin_form)?))
    }
}

/// How a direct call (no `gateway.proxy_url`) addresses a provider on its own connection.
#[derive(Debug)]
pub(crate) struct DirectTarget {
    /// The provider's connections in the [`ConnectionPool`].
    pub(crate) slot: usize,
    /// The host of its URLs, and port when not the scheme's default: the `Host` header.
    pub(crate) host: http::HeaderValue,
}

impl DirectTarget {
    /// The direct target of a provider whose URLs are like `url`, in `slot`.
    fn new(slot: usize, url: &http::Uri) -> Result<Self, String> {
        let authority = url.authority().ok_or("no host")?;
        let default_port = match url.scheme_str() {
            Some("https") => 443,
            _ => 80,
        };
        let host = match authority.port_u16() {
            Some(port) if port != default_port => format!("{}:{port}", authority.host()),
            _ => authority.host().to_owned(),
        };
        let host = http::HeaderValue::from_str(&host).map_err(|e| e.to_string())?;
        Ok(Self { slot, host })
    }
}

impl Provider {
    /// The provider's own key, from its `Authorization` value.
    pub(crate) fn api_key(&self) -> Option<&str> {
        self.authorization.as_ref()?.to_str().ok()?.strip_prefix("Bearer ")
    }

    /// Where `endpoint` is called; `None` when the provider does not serve it (or is `echo`).
    pub(crate) fn target(&self, endpoint: Endpoint) -> Option<&Target> {
        self.targets.iter().find(|t| t.endpoint == endpoint)
    }

    /// Checks that the provider of `model` serves `endpoint`.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] naming `model` and the endpoints it has.
    pub(crate) fn serves(&self, model: &str, endpoint: Endpoint) -> Result<(), ServiceError> {
        let endpoints = self.kind.endpoints();
        if endpoints.contains(&endpoint) {
            return Ok(());
        }
        let names: Vec<&str> = endpoints.iter().map(|e| e.as_str()).collect();
        let model: String = model.chars().take(128).collect();
        Err(FieldError::new(
            "model",
            format!(
                "{model} is not served on the {} endpoint; its endpoints: {}",
                endpoint.as_str(),
                names.join(", ")
            ),
        )
        .into())
    }

    /// A failed call to this provider ([`ServiceError::Upstream`], a 502), for `reason`.
    pub(crate) fn failed(&self, reason: String) -> ServiceError {
        ServiceError::Upstream { provider: self.name.clone(), reason }
    }
}

/// The routing table of `providers`: each provider's models, plus `echo` when
/// `config.echo_model` is on.
///
/// # Errors
/// [`ServiceError::Internal`] when an `openai` provider has no `base_url` (or not an http(s)
/// one), its `api_key` cannot be a header, or a model is routed twice.
pub(crate) fn route_table(
    config: &GatewayConfig,
    providers: &[ProviderConfig],
) -> Result<RouteTable, ServiceError> {
    let mut routes = BTreeMap::new();
    let bad = |m: String| Err(ServiceError::Internal(m));
    if config.echo_model {
        routes.insert(
            ECHO_MODEL.to_owned(),
            Arc::new(Provider {
                name: ECHO_MODEL.to_owned(),
                kind: ProviderKind::Echo,
                targets: Vec::new(),
                authorization: None,
                direct: None,
            }),
        );
    }
    for (slot, p) in providers.iter().enumerate() {
        let base_url = p.base_url.clone().unwrap_or_default();
        if p.kind == ProviderKind::Openai
            && !(base_url.starts_with("http://") || base_url.starts_with("https://"))
        {
            return bad(format!("provider {}: base_url must be an http(s) URL", p.name));
        }
        let mut targets = Vec::new();
        if p.kind != ProviderKind::Echo {
            for endpoint in p.kind.endpoints() {
                let path = p.kind.path(*endpoint);
                match Target::new(*endpoint, &base_url, path) {
                    Ok(target) => targets.push(target),
                    Err(e) => return bad(format!("provider {}: base_url: {e}", p.name)),
                }
            }
        }
        let authorization = match &p.api_key {
            Some(key) => {
                let value = format!("Bearer {}", key.expose_secret());
                let Ok(mut value) = http::HeaderValue::from_str(&value) else {
                    return bad(format!(
                        "provider {}: api_key holds characters a header cannot carry",
                        p.name
                    ));
                };
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let direct = match targets.first() {
            Some(target) => match DirectTarget::new(slot, &target.url) {
                Ok(target) => Some(target),
                Err(e) => return bad(format!("provider {}: base_url: {e}", p.name)),
            },
            None => None,
        };
        let provider = Arc::new(Provider {
            name: p.name.clone(),
            kind: p.kind,
            targets,
            authorization,
            direct,
        });
        for model in &p.models {
            if routes.insert(model.clone(), provider.clone()).is_some() {
                return bad(format!("model {model} is routed to more than one provider"));
            }
        }
    }
    Ok(routes)
}
