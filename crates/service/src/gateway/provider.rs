//! An upstream provider as every call to it reuses it, built once at start-up from its
//! `[[providers]]` entry: the URL of each endpoint it serves, its key as a header, how a
//! direct connection addresses it, and, for `anthropic`, its `anthropic-version` and where
//! tokens are counted.

use crate::config::{ProviderConfig, ProviderKind, DEFAULT_ANTHROPIC_VERSION};
use crate::error::ServiceError;
use aigw_domain::usage::Endpoint;
use secrecy::ExposeSecret;

/// The path of Anthropic's token counting below an `anthropic` provider's `base_url`.
const COUNT_TOKENS_PATH: &str = "/v1/messages/count_tokens";

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
    /// The header that carries its key upstream, built once, its value marked sensitive
    /// (never logged): `Authorization: Bearer <api_key>`, or `x-api-key: <api_key>` for
    /// `anthropic`.
    pub(crate) credential: Option<(http::HeaderName, http::HeaderValue)>,
    /// `anthropic` only: the `anthropic-version` sent when the caller sends none.
    pub(crate) anthropic_version: Option<http::HeaderValue>,
    /// `anthropic` only: where `POST /v1/messages/count_tokens` is called.
    pub(crate) count_tokens: Option<Target>,
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
    /// The provider's own key, from the header that carries it.
    pub(crate) fn api_key(&self) -> Option<&str> {
        let (name, value) = self.credential.as_ref()?;
        let value = value.to_str().ok()?;
        if name == http::header::AUTHORIZATION {
            value.strip_prefix("Bearer ")
        } else {
            Some(value)
        }
    }

    /// Where `endpoint` is called; `None` when the provider does not serve it (or is `echo`).
    pub(crate) fn target(&self, endpoint: Endpoint) -> Option<&Target> {
        self.targets.iter().find(|t| t.endpoint == endpoint)
    }

    /// A failed call to this provider ([`ServiceError::Upstream`], a 502), for `reason`.
    pub(crate) fn failed(&self, reason: String) -> ServiceError {
        ServiceError::Upstream { provider: self.name.clone(), reason }
    }
}

/// The provider `p`, the `slot`-th configured, with what every call to it reuses.
///
/// # Errors
/// The fault, naming the provider and its setting.
pub(crate) fn provider(slot: usize, p: &ProviderConfig) -> Result<Provider, String> {
    let base_url = p.base_url.clone().unwrap_or_default();
    if p.kind != ProviderKind::Echo
        && !(base_url.starts_with("http://") || base_url.starts_with("https://"))
    {
        return Err(format!("provider {}: base_url must be an http(s) URL", p.name));
    }
    let mut targets = Vec::new();
    if p.kind != ProviderKind::Echo {
        for endpoint in p.kind.endpoints() {
            let path = p.kind.path(*endpoint);
            let target = Target::new(*endpoint, &base_url, path)
                .map_err(|e| format!("provider {}: base_url: {e}", p.name))?;
            targets.push(target);
        }
    }
    let credential = match &p.api_key {
        Some(key) => Some(credential_header(p.kind, key.expose_secret()).ok_or_else(|| {
            format!("provider {}: api_key holds characters a header cannot carry", p.name)
        })?),
        None => None,
    };
    let (anthropic_version, count_tokens) =
        anthropic_parts(p, &base_url).map_err(|e| format!("provider {}: {e}", p.name))?;
    let direct = match targets.first() {
        Some(target) => Some(
            DirectTarget::new(slot, &target.url)
                .map_err(|e| format!("provider {}: base_url: {e}", p.name))?,
        ),
        None => None,
    };
    Ok(Provider {
        name: p.name.clone(),
        kind: p.kind,
        targets,
        credential,
        anthropic_version,
        count_tokens,
        direct,
    })
}

/// What an `anthropic` provider `p` (at `base_url`) adds to its calls: the
/// `anthropic-version` sent when the caller sends none, and where tokens are counted; `None`s
/// for the other kinds.
///
/// # Errors
/// The fault, when `anthropic_version` is not a header value or the URL is refused.
fn anthropic_parts(
    p: &ProviderConfig,
    base_url: &str,
) -> Result<(Option<http::HeaderValue>, Option<Target>), String> {
    if p.kind != ProviderKind::Anthropic {
        return Ok((None, None));
    }
    let version = p.anthropic_version.as_deref().unwrap_or(DEFAULT_ANTHROPIC_VERSION);
    let version = http::HeaderValue::from_str(version)
        .map_err(|_| "anthropic_version is not a header value".to_owned())?;
    let target = Target::new(Endpoint::Messages, base_url, COUNT_TOKENS_PATH)
        .map_err(|e| format!("base_url: {e}"))?;
    Ok((Some(version), Some(target)))
}

/// The header that carries a provider's `key` upstream for its `kind`, its value marked
/// sensitive: `Authorization: Bearer <key>`, or `x-api-key: <key>` for `anthropic`; `None`
/// when the key holds characters a header cannot carry.
fn credential_header(
    kind: ProviderKind,
    key: &str,
) -> Option<(http::HeaderName, http::HeaderValue)> {
    let (name, value) = match kind {
        ProviderKind::Anthropic => {
            (http::HeaderName::from_static("x-api-key"), http::HeaderValue::from_str(key))
        }
        _ => (http::header::AUTHORIZATION, http::HeaderValue::from_str(&format!("Bearer {key}"))),
    };
    let mut value = value.ok()?;
    value.set_sensitive(true);
    Some((name, value))
}
