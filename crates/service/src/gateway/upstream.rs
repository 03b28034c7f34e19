//! The fourth stage of a gateway call: the routed call sent upstream and its answer read
//! back, through one client path whether the call goes straight to the provider (keep-alive
//! connections pooled per worker) or through `gateway.proxy_url` (reqwest): the same request,
//! timeouts, size cap, metrics and error mapping either way.

use crate::config::GatewayConfig;
use crate::dialect::reply::GatewayReply;
use crate::error::{ServiceError, UpstreamRejection};
use crate::gateway::breaker::Breaker;
use crate::gateway::provider::{Provider, Target};
use crate::metrics::{name as metric, Metrics};
use aigw_domain::usage::Endpoint;
use aigw_infra::upstream_pool::ConnectionPool;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use secrecy::ExposeSecret;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One call to an upstream provider.
pub(crate) struct UpstreamCall<'a> {
    /// Its provider.
    pub(crate) provider: Arc<Provider>,
    /// The endpoint called (the provider serves it: checked when routed).
    pub(crate) endpoint: Endpoint,
    /// `POST` for a call to the endpoint; `GET` or `DELETE` for a stored resource below it.
    pub(crate) method: http::Method,
    /// What follows the endpoint's URL: empty for the endpoint itself, else a path below it
    /// and its query (`/resp_1/input_items?limit=2`), already checked.
    pub(crate) suffix: &'a str,
    /// The model asked for (the `model` label of the call's metrics; empty for a stored
    /// resource, which names none).
    pub(crate) model: String,
    /// Whether the caller asked for a stream.
    pub(crate) stream: bool,
    /// When the request arrived, for its first upstream call (the gateway's overhead is
    /// measured from there to that call); `None` for a retry.
    pub(crate) arrived: Option<Instant>,
    /// The caller's headers to pass on ([`crate::gateway::FORWARDED_HEADERS`], a dialect's
    /// own).
    pub(crate) headers: &'a [(&'static str, String)],
    /// Whether the call counts tokens (Anthropic's `/v1/messages/count_tokens`) instead of
    /// calling `endpoint`.
    pub(crate) count_tokens: bool,
    /// The longest wait for the answer's head, when shorter than `gateway.timeout_secs` (the
    /// call's deadline is nearer).
    pub(crate) head_timeout: Option<Duration>,
    /// The breaker told of a stream that breaks after its head (the head's own outcome is the
    /// caller's to report).
    pub(crate) breaker: Option<Breaker>,
}

/// A failed attempt: the error the caller gets if nothing else is tried, and what it says of
/// the deployment.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The caller's error.
    pub(crate) error: ServiceError,
    /// Whether another attempt may be made (the caller received nothing: a connect error, no
    /// answer head in time, a 429, 500, 502, 503 or 504), and after what `Retry-After`.
    pub(crate) retry: Option<Option<Duration>>,
    /// Whether it counts against the deployment's breaker (it failed, rather than refusing
    /// the request: every failure but a 4xx other than 401, 403, 407 and 429).
    pub(crate) deployment_failed: bool,
    /// Whether the upstream refused the request as longer than the model's context window.
    pub(crate) too_long: bool,
}

impl Failure {
    /// A failure that is neither retried nor counted against the deployment.
    fn fatal(error: ServiceError, deployment_failed: bool) -> Self {
        Self { error, retry: None, deployment_failed, too_long: false }
    }

    /// A failure after which another attempt may be made.
    fn retryable(error: ServiceError, after: Option<Duration>) -> Self {
        Self { error, retry: Some(after), deployment_failed: true, too_long: false }
    }
}

/// Sends calls upstream: the client and the limits every call has.
#[derive(Debug, Clone)]
pub(crate) struct Forwarder {
    client: Upstream,
    timeout: Duration,
    max_response_bytes: usize,
    metrics: Metrics,
}

/// Records the time from a request's arrival at `arrived` to now as the gateway's overhead
/// for `provider`.
pub(crate) fn record_overhead(metrics: &Metrics, provider: &str, arrived: Instant) {
    metrics
        .histogram(metric::GATEWAY_OVERHEAD_SECONDS, &[("provider", provider)])
        .record(arrived.elapsed().as_secs_f64());
}

impl Forwarder {
    /// The client of `config` (direct, or through `gateway.proxy_url`) for `providers`
    /// providers, with its timeouts and answer cap.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when the proxy URL or the TLS set-up is refused.
    pub(crate) fn new(config: &GatewayConfig, providers: usize) -> Result<Self, ServiceError> {
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
                    let tls = aigw_infra::upstream_pool::connector(connect_timeout)
                        .map_err(|e| ServiceError::Internal(format!("TLS set-up: {e}")))?;
                    Upstream::Direct(Arc::new(ConnectionPool::new(tls, providers)))
                }
            };
        Ok(Self {
            client,
            timeout: Duration::from_secs(config.upstream_timeout_secs.max(1)),
            max_response_bytes: config.max_response_bytes.max(1),
            metrics: Metrics::default(),
        })
    }

    /// Counts upstream calls, their latency and time to first byte into `metrics`.
    pub(crate) fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// [`Self::attempt`], its failure as the caller's error.
    ///
    /// # Errors
    /// As [`Self::attempt`].
    pub(crate) async fn forward(
        &self,
        call: UpstreamCall<'_>,
        body: Bytes,
    ) -> Result<GatewayReply, ServiceError> {
        self.attempt(call, body).await.map_err(|failure| failure.error)
    }

    /// Sends `body` to the call's provider and returns its answer: a 2xx as it came (JSON
    /// read whole, or a stream passed through), anything else as the matching error.
    ///
    /// # Errors
    /// A [`Failure`] carrying [`ServiceError::UpstreamTimeout`] when the answer's head or
    /// body takes longer than `gateway.timeout_secs` (or the head longer than the call's
    /// `head_timeout`); [`ServiceError::UpstreamRejected`] for a 4xx other than 401, 403 and
    /// 407; [`ServiceError::Upstream`] for everything else that is not a 2xx.
    pub(crate) async fn attempt(
        &self,
        call: UpstreamCall<'_>,
        body: Bytes,
    ) -> Result<GatewayReply, Failure> {
        let UpstreamCall {
            provider,
            endpoint,
            method,
            suffix,
            model,
            stream,
            arrived,
            headers,
            count_tokens,
            head_timeout,
            breaker,
        } = call;
        let not_built = |e: ServiceError| Failure::fatal(e, false);
        let target =
            if count_tokens { provider.count_tokens.as_ref() } else { provider.target(endpoint) };
        let target = target.ok_or_else(|| not_built(provider.failed("no upstream URL".into())))?;
        let (url, origin_form) = target
            .below(suffix)
            .map_err(|e| not_built(provider.failed(format!("request not built: {e}"))))?;
        let labels = UpstreamLabels {
            metrics: self.metrics.clone(),
            provider: provider.name.clone(),
            model,
        };
        let request =
            upstream_request(&provider, (method, url), body, stream, headers).map_err(not_built)?;
        if let Some(arrived) = arrived {
            record_overhead(&self.metrics, &provider.name, arrived);
        }
        let sent = Instant::now();
        let head_wait = head_timeout.map_or(self.timeout, |t| t.min(self.timeout));
        let response = self
            .head(&provider, (target, origin_form), request, head_wait, (&labels, sent))
            .await?;
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
            let body = self.pass_stream(&provider, response_body, (labels, breaker), sent);
            return Ok(GatewayReply::Stream { status, content_type, body });
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
                let timeout = ServiceError::UpstreamTimeout { provider: provider.name.clone() };
                return Err(Failure::fatal(timeout, true));
            }
            Ok(result) => {
                labels.finished(if result.is_ok() { class } else { "error" }, sent);
                result.map_err(|e| Failure::fatal(e, true))?
            }
        };
        if status.is_success() {
            return Ok(GatewayReply::Json { status, body: bytes });
        }
        Err(failure_of(&provider, status, &bytes, retry_after))
    }

    /// Sends `request` and waits up to `wait` for the answer's head.
    ///
    /// # Errors
    /// A retryable [`Failure`]: [`ServiceError::UpstreamTimeout`] when no head came in time,
    /// [`ServiceError::Upstream`] when the connection failed.
    async fn head(
        &self,
        provider: &Provider,
        to: (&Target, http::Uri),
        request: http::Request<Bytes>,
        wait: Duration,
        (labels, sent): (&UpstreamLabels, Instant),
    ) -> Result<UpstreamResponse, Failure> {
        match tokio::time::timeout(wait, self.client.send(provider, to, request)).await {
            Err(_) | Ok(Err(SendError::Timeout)) => {
                labels.finished("timeout", sent);
                let timeout = ServiceError::UpstreamTimeout { provider: provider.name.clone() };
                Err(Failure::retryable(timeout, None))
            }
            Ok(Err(SendError::Failed(reason))) => {
                labels.finished("error", sent);
                let failed = provider.failed(format!("request failed: {reason}"));
                Err(Failure::retryable(failed, None))
            }
            Ok(Ok(response)) => Ok(response),
        }
    }

    /// The upstream's server-sent events, passed on chunk by chunk: cut with an error after
    /// `gateway.max_response_bytes` in all or when no chunk comes for `gateway.timeout_secs`;
    /// the call's duration is recorded when it ends.
    fn pass_stream(
        &self,
        provider: &Provider,
        upstream: BoxStream<'static, Result<Bytes, String>>,
        (labels, breaker): (UpstreamLabels, Option<Breaker>),
        sent: Instant,
    ) -> BoxStream<'static, Result<Bytes, ServiceError>> {
        let idle = self.timeout;
        let cap = self.max_response_bytes;
        let provider_name = provider.name.clone();
        let chunks = stream::unfold(Some((upstream, 0usize)), move |state| {
            let provider_name = provider_name.clone();
            let labels = labels.clone();
            let breaker = breaker.clone();
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
                    Ok(Some(Err(e))) => {
                        if let Some(breaker) = &breaker {
                            breaker.failed(None);
                        }
                        Some((
                            Err(ServiceError::Upstream {
                                provider: provider_name,
                                reason: format!("stream broke: {e}"),
                            }),
                            None,
                        ))
                    }
                    Err(_) => {
                        if let Some(breaker) = &breaker {
                            breaker.failed(None);
                        }
                        Some((Err(ServiceError::UpstreamTimeout { provider: provider_name }), None))
                    }
                }
            }
        });
        chunks.boxed()
    }
}

/// How upstream calls are sent: directly on keep-alive connections pooled per worker
/// ([`ConnectionPool`]: no URL parse, no redirect or retry layer, no lock per call), or with
/// reqwest through `gateway.proxy_url`.
#[derive(Debug, Clone)]
pub(crate) enum Upstream {
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
    /// Sends `request` (absolute URI) to `provider`'s `target`, at `origin_form` (the
    /// request's path and query) on a direct connection; the answer's head within the
    /// caller's timeout.
    async fn send(
        &self,
        provider: &Provider,
        (target, origin_form): (&Target, http::Uri),
        request: http::Request<Bytes>,
    ) -> Result<UpstreamResponse, SendError> {
        match self {
            Upstream::Direct(pool) => {
                let Some(direct) = &provider.direct else {
                    return Err(SendError::Failed("no upstream URL".to_owned()));
                };
                let connect_to = &target.url;
                // On a connection of its own: origin-form, with `Host` (RFC 9112 3.2).
                let (mut parts, body) = request.into_parts();
                parts.uri = origin_form;
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

/// The upstream request of a call: `method` (`POST`, `GET` or `DELETE`) to `url` with `body`
/// (and its JSON content type when there is one), the `Accept` of a stream or of JSON, aigw's
/// `User-Agent`, the provider's key (in its kind's header), the caller's `headers` to pass on
/// ([`FORWARDED_HEADERS`], a dialect's own) and, for `anthropic`, the provider's
/// `anthropic-version` when the caller sent none.
///
/// # Errors
/// [`ServiceError::Upstream`] when the provider has no URL (`echo`) or a passed header is not
/// a valid header name or value.
fn upstream_request(
    provider: &Provider,
    (method, url): (http::Method, http::Uri),
    body: Bytes,
    stream: bool,
    headers: &[(&'static str, String)],
) -> Result<http::Request<Bytes>, ServiceError> {
    let has_body = !body.is_empty();
    // Built on its map: `http::request::Builder` parses every name and value again.
    let mut request = http::Request::new(body);
    *request.method_mut() = method;
    *request.uri_mut() = url;
    let map = request.headers_mut();
    map.reserve(5 + headers.len());
    if has_body {
        map.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    }
    map.insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(if stream {
            "text/event-stream"
        } else {
            "application/json"
        }),
    );
    map.insert(http::header::USER_AGENT, http::HeaderValue::from_static(USER_AGENT));
    if let Some((name, value)) = &provider.credential {
        map.insert(name.clone(), value.clone());
    }
    for (name, value) in headers {
        let not_built =
            |e: &dyn std::fmt::Display| provider.failed(format!("request not built: {name}: {e}"));
        let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|e| not_built(&e))?;
        let value = http::HeaderValue::from_str(value).map_err(|e| not_built(&e))?;
        map.append(name, value);
    }
    if let Some(version) = &provider.anthropic_version {
        map.entry(ANTHROPIC_VERSION).or_insert_with(|| version.clone());
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
/// message, `type`, `code` and `param` (the provider's own key scrubbed from them; OpenAI's
/// `{"error":{"message","type","code","param"}}` and Anthropic's
/// `{"type":"error","error":{"type","message"}}` both read here) and, for a
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

/// The failure of a non-2xx answer (`status`, its body `bytes`, its `Retry-After` in seconds):
/// its error ([`upstream_refusal`]), and whether it may be retried (429, 500, 502, 503, 504),
/// counts against the deployment (everything but a 4xx of the request) or says the request was
/// too long.
fn failure_of(
    provider: &Provider,
    status: http::StatusCode,
    bytes: &[u8],
    retry_after: Option<u64>,
) -> Failure {
    let too_long = status == http::StatusCode::BAD_REQUEST && refused_as_too_long(bytes);
    let error = upstream_refusal(provider, status, bytes, retry_after);
    match status.as_u16() {
        429 | 500 | 502 | 503 | 504 => {
            Failure::retryable(error, retry_after.map(Duration::from_secs))
        }
        401 | 403 | 407 => Failure::fatal(error, true),
        400..=499 => Failure { error, retry: None, deployment_failed: false, too_long },
        _ => Failure::fatal(error, true),
    }
}

/// Whether a 400's body says the request is longer than the model's context window: OpenAI's
/// `code: "context_length_exceeded"`, or a message that says so (Anthropic's "prompt is too
/// long", and the wordings of OpenAI-compatible servers).
fn refused_as_too_long(bytes: &[u8]) -> bool {
    let Ok(error) = serde_json::from_slice::<Value>(bytes) else {
        return false;
    };
    if error.pointer("/error/code").and_then(Value::as_str) == Some("context_length_exceeded") {
        return true;
    }
    let message = error
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_ascii_lowercase();
    ["context length", "context window", "prompt is too long", "maximum context"]
        .iter()
        .any(|phrase| message.contains(phrase))
}

/// Anthropic's API version header: the caller's when passed on, else the provider's.
const ANTHROPIC_VERSION: http::HeaderName = http::HeaderName::from_static("anthropic-version");

/// The `User-Agent` of upstream calls.
const USER_AGENT: &str = concat!("aigw/", env!("CARGO_PKG_VERSION"));

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
