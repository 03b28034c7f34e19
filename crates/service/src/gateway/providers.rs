//! The AI gateway: `POST /api/v1/ai/chat/completions` routed by `model` to a configured
//! provider.
//!
//! - The request body is validated (`model`, `messages[i].role`, `messages[i].content`,
//!   `stream`) and then forwarded byte for byte to `{base_url}/chat/completions` with the
//!   provider's own key; the caller's API key never leaves the gateway. (A metered stream
//!   whose caller did not ask for usage gains `"stream_options":{"include_usage":true},`
//!   after the opening brace: see [`crate::usage::meter::CallMeter::upstream_body`].)
//! - A 2xx upstream answer is returned unchanged: JSON as JSON, and with `"stream": true`
//!   server-sent events passed through chunk by chunk as the upstream sends them.
//! - Upstream answers other than 2xx: a 4xx is passed to the
//!   caller as [`ServiceError::UpstreamRejected`] with the upstream's status and error message
//!   (so OpenAI SDKs raise the matching error and do not retry a 400), a 429 with the
//!   upstream's `Retry-After`; 401, 403 and 407 mean the gateway's own credentials or proxy
//!   are wrong and become 502 `upstream_error`, as do 3xx (redirects are never followed) and
//!   5xx. Unreachable: 502; no answer in time: 504 `upstream_timeout`.
//! - Answers are read up to `gateway.max_response_bytes`; a larger one is 502 (a stream is
//!   cut there). Upstream calls use no proxy unless `gateway.proxy_url` is set: the
//!   `*_PROXY` environment variables are ignored.
//! - The built-in `echo` model answers with the last user message, offline, in the same
//!   OpenAI shapes (JSON and SSE), with tokenizer counts as its `usage`.
//! - With a [`Meter`] ([`Gateway::with_meter`]), every routed call is metered into the usage
//!   ledger (`crate::usage`); for a stream the meter may ask the provider for `usage`.

use crate::auth::{Authorized, Principal};
use crate::config::{GatewayConfig, ProviderConfig, ProviderKind};
use crate::dialect::chat::{validate_chat_request, ChatRequestSummary};
use crate::dialect::reply::ChatReply;
use crate::dialect::tokens;
use crate::error::{ServiceError, UpstreamRejection};
use crate::limits::key_limits::KeyLimits;
use crate::limits::key_rates::RateStatus;
use crate::metrics::{name as metric, Metrics};
use crate::usage::meter::Meter;
use aigw_domain::access::op;
use aigw_domain::FieldError;
use aigw_infra::upstream_pool::ConnectionPool;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Name of the built-in model.
pub const ECHO_MODEL: &str = "echo";

#[derive(Debug)]
struct Provider {
    name: String,
    kind: ProviderKind,
    /// `{base_url}/chat/completions`, built and parsed once (`None` for `echo`).
    chat_url: Option<http::Uri>,
    /// `Bearer <api_key>`, built once and marked sensitive (never logged).
    authorization: Option<http::HeaderValue>,
    /// How direct calls address it (`None` for `echo`).
    direct: Option<DirectTarget>,
}

/// How a direct call (no `gateway.proxy_url`) addresses a provider on its own connection.
#[derive(Debug)]
struct DirectTarget {
    /// The provider's connections in the [`ConnectionPool`].
    slot: usize,
    /// `chat_url`'s path and query: the request target (RFC 9112 3.2.1).
    origin_form: http::Uri,
    /// `chat_url`'s host, and port when not the scheme's default: the `Host` header.
    host: http::HeaderValue,
}

impl DirectTarget {
    /// The target of `chat_url`, in `slot`.
    fn new(slot: usize, chat_url: &http::Uri) -> Result<Self, String> {
        let origin_form = chat_url
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned())
            .parse::<http::Uri>()
            .map_err(|e| e.to_string())?;
        let authority = chat_url.authority().ok_or("no host")?;
        let default_port = match chat_url.scheme_str() {
            Some("https") => 443,
            _ => 80,
        };
        let host = match authority.port_u16() {
            Some(port) if port != default_port => format!("{}:{port}", authority.host()),
            _ => authority.host().to_owned(),
        };
        let host = http::HeaderValue::from_str(&host).map_err(|e| e.to_string())?;
        Ok(Self { slot, origin_form, host })
    }
}

/// How upstream calls are sent: directly on keep-alive connections pooled per worker
/// ([`ConnectionPool`]: no URL parse, no redirect or retry layer, no lock per call), or with
/// reqwest through `gateway.proxy_url`.
#[derive(Debug, Clone)]
enum Upstream {
    Direct(Arc<ConnectionPool>),
    Proxied(reqwest::Client),
}

/// An upstream's answer head and body, whichever client sent the call.
struct UpstreamResponse {
    status: http::StatusCode,
    headers: http::HeaderMap,
    body: BoxStream<'static, Result<Bytes, String>>,
}

/// Why an upstream call got no answer.
enum SendError {
    /// The connection or the answer's head took too long.
    Timeout,
    /// Anything else, described.
    Failed(String),
}

/// Whether `error`, or an error it was caused by, is an I/O timeout (a connect timeout).
fn caused_by_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// `error` and its causes, for the log and the 502's reason (hyper's own text is terse).
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

impl Upstream {
    /// Sends `request` (absolute URI) to `provider`; the answer's head within the caller's
    /// timeout.
    async fn send(
        &self,
        provider: &Provider,
        request: http::Request<Bytes>,
    ) -> Result<UpstreamResponse, SendError> {
        match self {
            Upstream::Direct(pool) => {
                let (Some(connect_to), Some(direct)) = (&provider.chat_url, &provider.direct)
                else {
                    return Err(SendError::Failed("no upstream URL".to_owned()));
                };
                // On a connection of its own: origin-form, with `Host` (RFC 9112 3.2).
                let (mut parts, body) = request.into_parts();
                parts.uri = direct.origin_form.clone();
                parts.headers.insert(http::header::HOST, direct.host.clone());
                let request = http::Request::from_parts(parts, http_body_util::Full::new(body));
                let (head, body) =
                    pool.send(direct.slot, connect_to, request).await.map_err(|e| {
                        if caused_by_timeout(e.as_ref()) {
                            SendError::Timeout
                        } else {
                            SendError::Failed(describe(e.as_ref()))
                        }
                    })?;
                let body = body.map(|chunk| chunk.map_err(|e| describe(&e))).boxed();
                Ok(UpstreamResponse { status: head.status, headers: head.headers, body })
            }
            Upstream::Proxied(client) => {
                let request = reqwest::Request::try_from(request)
                    .map_err(|e| SendError::Failed(e.to_string()))?;
                let response = client.execute(request).await.map_err(|e| {
                    if e.is_timeout() {
                        SendError::Timeout
                    } else {
                        SendError::Failed(describe(&e))
                    }
                })?;
                let (status, headers) = (response.status(), response.headers().clone());
                let body = response.bytes_stream().map(|chunk| chunk.map_err(|e| describe(&e)));
                Ok(UpstreamResponse { status, headers, body: body.boxed() })
            }
        }
    }
}

/// Routes chat completions to providers by model name.
#[derive(Debug, Clone)]
pub struct Gateway {
    routes: Arc<BTreeMap<String, Arc<Provider>>>,
    client: Upstream,
    timeout: Duration,
    max_response_bytes: usize,
    meter: Option<Meter>,
    key_limits: Option<KeyLimits>,
    metrics: Metrics,
}

impl Gateway {
    /// Builds the routing table: each provider's models, plus `echo` when enabled.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when an `openai` provider has no `base_url` (or not an
    /// http(s) one), a model is routed twice, or the HTTP client cannot be built.
    pub fn new(config: &GatewayConfig, providers: &[ProviderConfig]) -> Result<Self, ServiceError> {
        let mut routes = BTreeMap::new();
        let bad = |m: String| Err(ServiceError::Internal(m));
        if config.echo_model {
            routes.insert(
                ECHO_MODEL.to_owned(),
                Arc::new(Provider {
                    name: ECHO_MODEL.to_owned(),
                    kind: ProviderKind::Echo,
                    chat_url: None,
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
            let chat_url = match p.kind {
                ProviderKind::Echo => None,
                ProviderKind::Openai => {
                    let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
                    // Checked as a URL first (the error texts of `url` name the fault), then
                    // kept as the `Uri` every call uses.
                    let parsed = match reqwest::Url::parse(&url) {
                        Ok(url) => url,
                        Err(e) => return bad(format!("provider {}: base_url: {e}", p.name)),
                    };
                    match parsed.as_str().parse::<http::Uri>() {
                        Ok(uri) => Some(uri),
                        Err(e) => return bad(format!("provider {}: base_url: {e}", p.name)),
                    }
                }
            };
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
            let direct = match &chat_url {
                Some(url) => match DirectTarget::new(slot, url) {
                    Ok(target) => Some(target),
                    Err(e) => return bad(format!("provider {}: base_url: {e}", p.name)),
                },
                None => None,
            };
            let provider = Arc::new(Provider {
                name: p.name.clone(),
                kind: p.kind,
                chat_url,
                authorization,
                direct,
            });
            for model in &p.models {
                if routes.insert(model.clone(), provider.clone()).is_some() {
                    return bad(format!("model {model} is routed to more than one provider"));
                }
            }
        }
        let connect_timeout = Duration::from_secs(config.connect_timeout_secs.max(1));
        let client =
            match &config.proxy_url {
                Some(url) => Upstream::Proxied(
                    reqwest::Client::builder()
                        .connect_timeout(connect_timeout)
                        .redirect(reqwest::redirect::Policy::none())
                        .proxy(reqwest::Proxy::all(url.expose_secret()).map_err(|e| {
                            ServiceError::Internal(format!("gateway.proxy_url: {e}"))
                        })?)
                        .build()
                        .map_err(|e| ServiceError::Internal(format!("HTTP client: {e}")))?,
                ),
                None => {
                    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
                    http.set_connect_timeout(Some(connect_timeout));
                    http.set_nodelay(true);
                    http.enforce_http(false);
                    let tls = hyper_rustls::HttpsConnectorBuilder::new()
                        .with_provider_and_webpki_roots(Arc::new(
                            rustls::crypto::ring::default_provider(),
                        ))
                        .map_err(|e| ServiceError::Internal(format!("TLS set-up: {e}")))?
                        .https_or_http()
                        .enable_http1()
                        .wrap_connector(http);
                    Upstream::Direct(Arc::new(ConnectionPool::new(tls, providers.len())))
                }
            };
        Ok(Self {
            routes: Arc::new(routes),
            client,
            timeout: Duration::from_secs(config.upstream_timeout_secs.max(1)),
            max_response_bytes: config.max_response_bytes.max(1),
            meter: None,
            key_limits: None,
            metrics: Metrics::default(),
        })
    }

    /// Meters every routed call into the usage ledger with `meter`.
    pub fn with_meter(mut self, meter: Option<Meter>) -> Self {
        self.meter = meter;
        self
    }

    /// Counts upstream calls, their latency and time to first byte, and the gateway's own
    /// overhead into `metrics` (docs/operations.md).
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Enforces keys' budgets and their `rpm_limit` / `tpm_limit` with `key_limits`.
    pub fn with_key_limits(mut self, key_limits: KeyLimits) -> Self {
        self.key_limits = Some(key_limits);
        self
    }

    /// The model names offered to `principal` (those its key's `allowed_models` match),
    /// sorted.
    pub fn models_for(&self, principal: &Principal) -> Vec<String> {
        self.routes.keys().filter(|m| principal.allows_model(m)).cloned().collect()
    }

    /// Validates `body` and answers it from the model's provider, for a request that arrived
    /// at `arrived` (the gateway's overhead is measured from there to the upstream call).
    /// `request_id` (the answer's `x-request-id`) identifies the call in the usage ledger;
    /// `forward_headers` (trace context, request id: names from [`FORWARDED_HEADERS`]) go
    /// upstream with it. Also answers where the key stands against its own `rpm_limit` /
    /// `tpm_limit` after the call was admitted (`None`: the key has none), for the
    /// `x-ratelimit-*` headers.
    ///
    /// # Errors
    /// [`ServiceError::Forbidden`] for a model outside the key's `allowed_models`
    /// (`required: model:<name>`; `ai_gateway` itself is checked by the proof `principal`
    /// before this is called); [`ServiceError::Invalid`] on a malformed body (the fields of
    /// [`validate_chat_request`], and a file sent by id for a key with a budget or a
    /// `tpm_limit`); [`ServiceError::NotFound`] (`resource: model`) for an unknown model;
    /// [`ServiceError::BudgetExceeded`] when the key's budget cannot take the call's worst
    /// case; [`ServiceError::RateLimited`] when its `rpm_limit` or `tpm_limit` cannot;
    /// [`ServiceError::Upstream`] / [`ServiceError::UpstreamTimeout`] when the provider fails.
    pub async fn chat_completion_since(
        &self,
        principal: &Authorized<op::ChatCompletion>,
        request_id: &str,
        body: Bytes,
        arrived: Instant,
        forward_headers: &[(&'static str, String)],
    ) -> Result<(ChatReply, Option<RateStatus>), ServiceError> {
        let summary = validate_chat_request(&body)?;
        principal.authorize_model(&summary.model)?;
        let provider = self.routes.get(&summary.model).ok_or_else(|| ServiceError::NotFound {
            resource: "model",
            id: summary.model.chars().take(128).collect(),
        })?;
        let worst =
            aigw_domain::usage::TokenUsage::new(summary.prompt_bound, summary.completion_cap);
        let mut admission = match &self.key_limits {
            Some(limits) => {
                if let Some(field) = &summary.unbounded_part {
                    let limited = principal.limit_levels().any(|level| {
                        level.policy.max_budget_micros.is_some() || level.policy.tpm_limit.is_some()
                    });
                    if limited {
                        return Err(FieldError::new(
                            field.clone(),
                            "a file sent by id cannot be priced before the call, so a key \
                             with a budget or a tpm_limit must send file_data instead",
                        )
                        .into());
                    }
                }
                let admitted =
                    limits.admit(principal, &summary.model, &body, &worst, summary.images).await;
                admitted.inspect_err(|refused| self.count_refusal(refused))?
            }
            None => crate::limits::key_limits::Admitted::default(),
        };
        // A budget in `clamp` mode lowered `max_tokens`: that body goes upstream.
        let (body, summary, worst) = match admission.clamped.take() {
            Some((clamped, summary)) => {
                let worst = aigw_domain::usage::TokenUsage::new(
                    summary.prompt_bound,
                    summary.completion_cap,
                );
                (clamped, summary, worst)
            }
            None => (body, summary, worst),
        };
        let status = admission.status;
        let meter = self.meter.as_ref();
        let mut call = meter.and_then(|m| {
            m.start(principal, request_id, &summary.model, &provider.name, summary.stream, &body)
        });
        // Without metering there is no real cost: the reservation stays charged.
        if let Some(call) = call.as_mut() {
            call.hold(admission, worst);
        }
        let (body, include_usage) = match call.as_mut() {
            Some(call) => call.upstream_body(body, &summary),
            None => (body, summary.include_usage),
        };
        let reply = match provider.kind {
            ProviderKind::Echo => {
                let reply = serde_json::from_slice::<Value>(&body)
                    .map(|parsed| echo(&parsed, &summary, include_usage))
                    .map_err(|_| FieldError::new("body", "is not valid JSON").into());
                self.overhead(&provider.name, arrived);
                reply
            }
            ProviderKind::Openai => {
                let call = UpstreamCall {
                    provider: provider.clone(),
                    model: summary.model.clone(),
                    stream: summary.stream,
                    arrived,
                    headers: forward_headers,
                };
                self.forward(call, body).await
            }
        };
        let reply = match call {
            Some(call) => call.finish(reply),
            None => reply,
        };
        Ok((reply?, status))
    }

    /// Counts a refusal by a limit of the key or its team (`aigw_limit_refusals_total`).
    fn count_refusal(&self, refused: &ServiceError) {
        let (scope, reason) = match refused {
            ServiceError::BudgetExceeded { scope, .. } => (*scope, "budget"),
            ServiceError::RateLimited { scope: Some(scope), .. } => (*scope, "rate"),
            _ => return,
        };
        self.metrics
            .count(metric::LIMIT_REFUSALS_TOTAL, &[("scope", scope.as_str()), ("reason", reason)]);
    }

    /// Records the time from the request's arrival to now as the gateway's overhead.
    fn overhead(&self, provider: &str, arrived: Instant) {
        self.metrics
            .histogram(metric::GATEWAY_OVERHEAD_SECONDS, &[("provider", provider)])
            .record(arrived.elapsed().as_secs_f64());
    }

    /// Sends `body` to the call's provider and returns its answer: a 2xx as it came (JSON
    /// read whole, or a stream passed through), anything else as the matching error.
    ///
    /// # Errors
    /// [`ServiceError::UpstreamTimeout`] when the answer's head or body takes longer than
    /// `gateway.timeout_secs`; [`ServiceError::UpstreamRejected`] for a 4xx other than 401,
    /// 403 and 407; [`ServiceError::Upstream`] for everything else that is not a 2xx.
    async fn forward(
        &self,
        call: UpstreamCall<'_>,
        body: Bytes,
    ) -> Result<ChatReply, ServiceError> {
        let UpstreamCall { provider, model, stream, arrived, headers } = call;
        let labels = UpstreamLabels {
            metrics: self.metrics.clone(),
            provider: provider.name.clone(),
            model,
        };
        let request = upstream_request(&provider, body, stream, headers)?;
        self.overhead(&provider.name, arrived);
        let sent = Instant::now();
        let response =
            match tokio::time::timeout(self.timeout, self.client.send(&provider, request)).await {
                Err(_) | Ok(Err(SendError::Timeout)) => {
                    labels.finished("timeout", sent);
                    return Err(ServiceError::UpstreamTimeout { provider: provider.name.clone() });
                }
                Ok(Err(SendError::Failed(reason))) => {
                    labels.finished("error", sent);
                    return Err(provider.failed(format!("request failed: {reason}")));
                }
                Ok(Ok(r)) => r,
            };
        let UpstreamResponse { status, headers: response_headers, body: response_body } = response;
        labels.histogram(metric::UPSTREAM_TTFB_SECONDS).record(sent.elapsed().as_secs_f64());
        let class = crate::metrics::status_class(status.as_u16());
        let content_type = response_headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_owned();
        if status.is_success() && stream && content_type.starts_with("text/event-stream") {
            // A stream is counted once its head is in; its duration when it ends.
            labels.count(class);
            let body = self.pass_stream(&provider, response_body, labels, sent);
            return Ok(ChatReply::Stream { status, content_type, body });
        }
        let retry_after = response_headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let bytes = match tokio::time::timeout(
            self.timeout,
            read_answer(&provider, response_body, self.max_response_bytes),
        )
        .await
        {
            Err(_) => {
                labels.finished("timeout", sent);
                return Err(ServiceError::UpstreamTimeout { provider: provider.name.clone() });
            }
            Ok(result) => {
                labels.finished(if result.is_ok() { class } else { "error" }, sent);
                result?
            }
        };
        if status.is_success() {
            return Ok(ChatReply::Json { status, body: bytes });
        }
        Err(upstream_refusal(&provider, status, &bytes, retry_after))
    }

    /// The upstream's server-sent events, passed on chunk by chunk: cut with an error after
    /// `gateway.max_response_bytes` in all or when no chunk comes for `gateway.timeout_secs`;
    /// the call's duration is recorded when it ends.
    fn pass_stream(
        &self,
        provider: &Provider,
        upstream: BoxStream<'static, Result<Bytes, String>>,
        labels: UpstreamLabels,
        sent: Instant,
    ) -> BoxStream<'static, Result<Bytes, ServiceError>> {
        let idle = self.timeout;
        let cap = self.max_response_bytes;
        let provider_name = provider.name.clone();
        let chunks = stream::unfold(Some((upstream, 0usize)), move |state| {
            let provider_name = provider_name.clone();
            let labels = labels.clone();
            async move {
                let (mut upstream, seen) = state?;
                match tokio::time::timeout(idle, upstream.next()).await {
                    Ok(None) => {
                        labels.duration(sent);
                        None
                    }
                    Ok(Some(Ok(chunk))) if seen + chunk.len() > cap => Some((
                        Err(ServiceError::Upstream {
                            provider: provider_name,
                            reason: format!("stream longer than {cap} bytes; cut"),
                        }),
                        None,
                    )),
                    Ok(Some(Ok(chunk))) => {
                        let seen = seen + chunk.len();
                        Some((Ok(chunk), Some((upstream, seen))))
                    }
                    Ok(Some(Err(e))) => Some((
                        Err(ServiceError::Upstream {
                            provider: provider_name,
                            reason: format!("stream broke: {e}"),
                        }),
                        None,
                    )),
                    Err(_) => {
                        Some((Err(ServiceError::UpstreamTimeout { provider: provider_name }), None))
                    }
                }
            }
        });
        chunks.boxed()
    }
}

/// The upstream request of a chat call: `POST {base_url}/chat/completions` with `body`, its
/// JSON content type, the `Accept` of a stream or of JSON, aigw's `User-Agent`, the
/// provider's key and the caller's `headers` to pass on ([`FORWARDED_HEADERS`]).
///
/// # Errors
/// [`ServiceError::Upstream`] when the provider has no URL (`echo`) or a passed header is not
/// a valid header name or value.
fn upstream_request(
    provider: &Provider,
    body: Bytes,
    stream: bool,
    headers: &[(&'static str, String)],
) -> Result<http::Request<Bytes>, ServiceError> {
    let url = provider.chat_url.clone().ok_or_else(|| provider.failed("no upstream URL".into()))?;
    // Built on its map: `http::request::Builder` parses every name and value again.
    let mut request = http::Request::new(body);
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = url;
    let map = request.headers_mut();
    map.reserve(5 + headers.len());
    map.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    map.insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(if stream {
            "text/event-stream"
        } else {
            "application/json"
        }),
    );
    map.insert(http::header::USER_AGENT, http::HeaderValue::from_static(USER_AGENT));
    if let Some(authorization) = &provider.authorization {
        map.insert(http::header::AUTHORIZATION, authorization.clone());
    }
    for (name, value) in headers {
        let not_built =
            |e: &dyn std::fmt::Display| provider.failed(format!("request not built: {name}: {e}"));
        let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|e| not_built(&e))?;
        let value = http::HeaderValue::from_str(value).map_err(|e| not_built(&e))?;
        map.append(name, value);
    }
    Ok(request)
}

/// Reads a whole (non-streamed) answer body, up to `cap` bytes.
///
/// # Errors
/// [`ServiceError::Upstream`] when the body breaks off or is larger than `cap`.
async fn read_answer(
    provider: &Provider,
    mut chunks: BoxStream<'static, Result<Bytes, String>>,
    cap: usize,
) -> Result<Bytes, ServiceError> {
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = chunks.next().await {
        let chunk =
            chunk.map_err(|e| provider.failed(format!("reading the answer failed: {e}")))?;
        if body.len() + chunk.len() > cap {
            return Err(provider.failed(format!("answer larger than {cap} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The error a non-2xx answer (`status`, its body `bytes`) becomes: a 4xx other than 401, 403
/// and 407 is passed to the caller as [`ServiceError::UpstreamRejected`] with the upstream's
/// message, `type`, `code` and `param` (the provider's own key scrubbed from them) and, for a
/// 429, its `Retry-After` in seconds (1 when absent); everything else is
/// [`ServiceError::Upstream`] (the gateway's own key, account or proxy is wrong, a redirect,
/// a 5xx).
fn upstream_refusal(
    provider: &Provider,
    status: http::StatusCode,
    bytes: &[u8],
    retry_after: Option<u64>,
) -> ServiceError {
    let error = serde_json::from_slice::<Value>(bytes).ok();
    let field = |name: &str| {
        error.as_ref().and_then(|v| v.pointer(&format!("/error/{name}"))).and_then(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
    };
    let message = field("message").unwrap_or_default();
    match status.as_u16() {
        // The gateway's own key, account or proxy is wrong: the caller can do nothing.
        401 | 403 | 407 => provider.failed(format!("upstream answered {status}: {message}")),
        code @ 400..=499 => {
            // Never pass the provider's own key on, should the upstream quote it.
            let scrub = |s: String| match provider.api_key() {
                Some(k) if !k.is_empty() => s.replace(k, "***"),
                _ => s,
            };
            let message: String = scrub(message).chars().take(2000).collect();
            ServiceError::UpstreamRejected(Box::new(UpstreamRejection {
                provider: provider.name.clone(),
                status: code,
                message: if message.is_empty() {
                    format!("the upstream provider answered {status}")
                } else {
                    message
                },
                kind: field("type").map(scrub),
                code: field("code").map(scrub),
                param: field("param").map(scrub),
                retry_after_secs: if code == 429 { Some(retry_after.unwrap_or(1)) } else { None },
            }))
        }
        _ => provider.failed(format!("upstream answered {status}: {message}")),
    }
}

/// The `User-Agent` of upstream calls.
const USER_AGENT: &str = concat!("aigw/", env!("CARGO_PKG_VERSION"));

impl Provider {
    /// The provider's own key, from its `Authorization` value.
    fn api_key(&self) -> Option<&str> {
        self.authorization.as_ref()?.to_str().ok()?.strip_prefix("Bearer ")
    }

    /// A failed call to this provider ([`ServiceError::Upstream`], a 502), for `reason`.
    fn failed(&self, reason: String) -> ServiceError {
        ServiceError::Upstream { provider: self.name.clone(), reason }
    }
}

/// Request headers passed on to the upstream when the caller's request carries them: W3C
/// trace context and the request id.
pub const FORWARDED_HEADERS: [&str; 3] = ["traceparent", "tracestate", "x-request-id"];

/// One call to an upstream provider.
struct UpstreamCall<'a> {
    provider: Arc<Provider>,
    model: String,
    stream: bool,
    arrived: Instant,
    headers: &'a [(&'static str, String)],
}

/// The labels of one upstream call's metrics (provider and model: both from configuration).
#[derive(Clone)]
struct UpstreamLabels {
    metrics: Metrics,
    provider: String,
    model: String,
}

impl UpstreamLabels {
    fn histogram(&self, name: &'static str) -> ::metrics::Histogram {
        self.metrics.histogram(name, &[("provider", &self.provider), ("model", &self.model)])
    }

    /// Counts the call with `class` (`2xx`…, `error`, `timeout`).
    fn count(&self, class: &str) {
        self.metrics.count(
            metric::UPSTREAM_REQUESTS_TOTAL,
            &[("provider", &self.provider), ("model", &self.model), ("status_class", class)],
        );
    }

    /// Records the call's latency, from `sent` to now.
    fn duration(&self, sent: Instant) {
        self.histogram(metric::UPSTREAM_DURATION_SECONDS).record(sent.elapsed().as_secs_f64());
    }

    /// Counts the call with `class` and records its latency from `sent`.
    fn finished(&self, class: &str, sent: Instant) {
        self.count(class);
        self.duration(sent);
    }
}

/// The text of the last `user` message (string content, or the `text` parts of an array).
fn last_user_text(body: &Value) -> String {
    let messages = body.get("messages").and_then(Value::as_array);
    let last = messages.and_then(|m| {
        m.iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
    });
    match last.and_then(|m| m.get("content")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The built-in `echo` model: answers with the last user message, as an OpenAI chat
/// completion (or, when streaming, as `chat.completion.chunk` events ending in `[DONE]`, with a
/// final usage chunk when `include_usage`). Its `usage` counts tokens with the `cl100k_base`
/// tokenizer, as OpenAI counts a chat prompt.
fn echo(body: &Value, summary: &ChatRequestSummary, include_usage: bool) -> ChatReply {
    let text = last_user_text(body);
    let id = format!("chatcmpl-{}", uuid::Uuid::now_v7().simple());
    let created = chrono::Utc::now().timestamp();
    let model = summary.model.clone();
    let encoding = tokens::encoding_for_model(&model);
    let prompt_tokens = tokens::count_prompt(encoding, body);
    let completion_tokens = tokens::count_text(encoding, &text);
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens
    });
    if !summary.stream {
        let reply = json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": "stop"
            }],
            "usage": usage
        });
        return ChatReply::Json {
            status: http::StatusCode::OK,
            body: Bytes::from(reply.to_string()),
        };
    }
    let event = |event: Value| Ok(Bytes::from(format!("data: {event}\n\n")));
    let chunk = |delta: Value, finish: Value| {
        event(json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
        }))
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    for piece in text.split_inclusive(' ') {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    events.push(chunk(json!({}), json!("stop")));
    if include_usage {
        events.push(event(json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage
        })));
    }
    events.push(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
    ChatReply::Stream {
        status: http::StatusCode::OK,
        content_type: "text/event-stream".to_owned(),
        body: stream::iter(events).boxed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_answers_the_last_user_message() {
        let body = json!({"model": "echo", "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ignored"},
            {"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "there"}]}
        ]});
        assert_eq!(last_user_text(&body), "hello there");
    }

    /// The budget counts the built-in model's prompt with the tokenizer its `usage` uses.
    #[test]
    fn the_echo_model_s_prompt_counts_with_its_own_tokenizer() {
        let prices = crate::prices::PriceTable::from_providers(&[]).unwrap_or_default();
        assert_eq!(
            prices.prompt_counting(ECHO_MODEL),
            tokens::PromptCounting::Tokenizer(tokens::encoding_for_model(ECHO_MODEL))
        );
    }
}
