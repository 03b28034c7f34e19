//! Structured logs (`tracing`), the request id every answer carries as `x-request-id`, and
//! the access log: one line per request.

use crate::error::REQUEST_ID;
use crate::settings::{LogFormat, LogSettings, TelemetrySettings};
use crate::startup::AppState;
use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage};
use aigw_service::Metrics;
use bytes::Bytes;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;
use tracing::Instrument;
use tracing_subscriber::EnvFilter;

/// Keeps the log writer thread alive, and the OTLP span exporter when configured; logs and
/// spans still queued are written when it is dropped, so hold it until the process ends.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard {
    _writer: aigw_infra::log_writer::BatchWriterGuard<Box<dyn std::io::Write + Send>>,
    traces: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl std::fmt::Debug for LogGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogGuard").field("otlp", &self.traces.is_some()).finish()
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.traces.take() {
            // Exports what is still batched; on its own thread, since the exporter's HTTP
            // client is a blocking one and this may run on an async runtime.
            let done = std::thread::spawn(move || provider.shutdown());
            if let Ok(Err(e)) = done.join() {
                eprintln!("aigw: exporting the last spans failed: {e}");
            }
        }
    }
}

/// Whether spans are exported over OTLP (then a request continues the caller's trace in its
/// own span, and its upstream calls carry that span as their parent).
static OTLP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn otlp_enabled() -> bool {
    OTLP.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether each request gets a tracing span: for OTLP export, and for the text format, which
/// shows a line's spans. JSON lines do without one (`aigw_infra::log_format::JsonLines` writes the
/// request's id from its task-local instead): building, entering and closing a span per request
/// was about 3 % of a chat call's instructions (callgrind, docs/performance.md).
static REQUEST_SPANS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn request_spans() -> bool {
    REQUEST_SPANS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The value of a JSON line's request span when it is written outside a tracing span: the
/// request's task-local id, if the line is written while a request is handled.
fn request_id_span(with: &mut dyn FnMut(&str)) {
    let _ = REQUEST_ID.try_with(|id| with(id));
}

/// The OTLP/HTTP (protobuf) span exporter for `endpoint` (a collector's base URL such as
/// `http://collector:4318`; `/v1/traces` is appended unless present), batching spans.
fn otlp_provider(
    endpoint: &str,
    service_name: &str,
) -> anyhow::Result<opentelemetry_sdk::trace::SdkTracerProvider> {
    use opentelemetry_otlp::WithExportConfig;
    let endpoint = endpoint.trim_end_matches('/');
    let url = if endpoint.ends_with("/v1/traces") {
        endpoint.to_owned()
    } else {
        format!("{endpoint}/v1/traces")
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .build()?;
    let resource =
        opentelemetry_sdk::Resource::builder().with_service_name(service_name.to_owned()).build();
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Where log lines go: stdout for the server, stderr for the operator commands (whose result
/// alone is on stdout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOutput {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Installs the global subscriber (`RUST_LOG` overrides `log.level`), writing to `output` from a
/// dedicated thread (`aigw-log`, [`aigw_infra::log_writer`]) every 10 ms, so a request never waits
/// on the terminal or a pipe, nor wakes that thread. Each logging thread appends to a buffer
/// of its own; up to 16 MiB of lines wait in memory, and a thread whose buffer holds its
/// share of that (the writer that far behind) writes it itself (nothing is dropped). With
/// `telemetry.otlp_endpoint`, spans are also exported over OTLP/HTTP (batched, from a thread
/// of their own). Safe to call twice (the second subscriber is not installed).
///
/// # Errors
/// When the OTLP exporter cannot be built (a malformed endpoint).
pub fn init(
    settings: &LogSettings,
    telemetry: &TelemetrySettings,
    output: LogOutput,
) -> anyhow::Result<LogGuard> {
    use opentelemetry::trace::TracerProvider;
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(settings.level.clone()));
    // Colours only for a person at a terminal: never escape codes in a file or a pipe.
    let (stream, ansi): (Box<dyn std::io::Write + Send>, bool) = match output {
        LogOutput::Stdout => (Box::new(std::io::stdout()), std::io::stdout().is_terminal()),
        LogOutput::Stderr => (Box::new(std::io::stderr()), std::io::stderr().is_terminal()),
    };
    let (writer, guard) = aigw_infra::log_writer::BatchWriter::start(
        stream,
        aigw_infra::log_writer::Limits::default(),
        "aigw-log",
    )?;
    let (json, text) = match settings.format {
        LogFormat::Json => (
            Some(
                tracing_subscriber::fmt::layer()
                    .event_format(aigw_infra::log_format::JsonLines::default().with_fallback_span(
                        "request",
                        "request_id",
                        request_id_span,
                    ))
                    .fmt_fields(aigw_infra::log_format::span_fields())
                    .with_writer(writer),
            ),
            None,
        ),
        LogFormat::Text => (
            None,
            Some(
                tracing_subscriber::fmt::layer()
                    .with_target(false)
                    .with_ansi(ansi)
                    .with_writer(writer),
            ),
        ),
    };
    let traces = match &telemetry.otlp_endpoint {
        Some(endpoint) => Some(otlp_provider(endpoint, &telemetry.service_name)?),
        None => None,
    };
    let otel =
        traces.as_ref().map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("aigw")));
    let installed =
        tracing_subscriber::registry().with(filter).with(json).with(text).with(otel).try_init();
    if installed.is_ok() && traces.is_some() {
        OTLP.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    if installed.is_ok() && (traces.is_some() || settings.format == LogFormat::Text) {
        REQUEST_SPANS.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(LogGuard { _writer: guard, traces })
}

/// The W3C trace context a caller sent, as an OpenTelemetry context.
fn caller_context(headers: &actix_web::http::header::HeaderMap) -> opentelemetry::Context {
    use opentelemetry::propagation::TextMapPropagator;
    struct Extractor<'a>(&'a actix_web::http::header::HeaderMap);
    impl opentelemetry::propagation::Extractor for Extractor<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(HeaderName::as_str).collect()
        }
    }
    opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&Extractor(headers))
}

/// `traceparent` and `tracestate` of the current span (the request's), for the upstream.
fn current_trace_headers() -> Vec<(&'static str, String)> {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let mut carrier = std::collections::HashMap::new();
    let context = tracing::Span::current().context();
    opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .inject_context(&context, &mut carrier);
    ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|name| carrier.remove(name).filter(|v| !v.is_empty()).map(|v| (name, v)))
        .collect()
}

/// Who a request authenticated as, for the access log: ids only, never a secret. Put in the
/// request's extensions by the [`crate::extract::Authorized`] and [`crate::extract::AdminCaller`] extractors.
#[derive(Debug, Clone)]
pub struct CallerIds {
    /// `access_token` or `api_key`.
    pub credential: &'static str,
    /// The user.
    pub user_id: String,
    /// The session of an access token.
    pub session_id: Option<String>,
    /// The API key.
    pub key_id: Option<String>,
}

impl CallerIds {
    /// The ids of `principal`.
    pub fn of(principal: &aigw_service::Principal) -> Self {
        match principal {
            aigw_service::Principal::User { user_id, session_id, .. } => Self {
                credential: "access_token",
                user_id: user_id.clone(),
                session_id: Some(session_id.clone()),
                key_id: None,
            },
            aigw_service::Principal::ApiKey { key_id, user_id, .. } => Self {
                credential: "api_key",
                user_id: user_id.clone(),
                session_id: None,
                key_id: Some(key_id.clone()),
            },
        }
    }
}

/// When the request arrived (request extension; the gateway's overhead is measured from it).
#[derive(Debug, Clone, Copy)]
pub struct Arrival(pub Instant);

/// The cause of a 5xx answer, for the access log (response extension set by
/// [`crate::error::ApiError`]); never sent to the client.
#[derive(Debug, Clone)]
pub struct ErrorCause(pub String);

/// An `x-request-id` a trusted proxy may pass: 1 to 128 characters of `A-Z a-z 0-9 - _ . : /
/// + =` (anything else is ignored rather than logged).
fn proxy_request_id(req: &ServiceRequest, state: Option<&AppState>) -> Option<String> {
    let state = state?;
    if !state.limits.from_trusted_proxy(req.request()) {
        return None;
    }
    let value = req.headers().get(X_REQUEST_ID)?.to_str().ok()?;
    let ok = !value.is_empty()
        && value.len() <= 128
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=".contains(&b));
    ok.then(|| value.to_owned())
}

/// The headers a chat call sends upstream besides its body (`aigw_service::gateway::
/// FORWARDED_HEADERS`): the caller's W3C `traceparent` and `tracestate`, when well-formed, so
/// the upstream continues the caller's trace, and `x-request-id` with this request's id.
pub fn upstream_headers(
    req: &actix_web::HttpRequest,
    request_id: &str,
) -> Vec<(&'static str, String)> {
    let mut headers = Vec::with_capacity(3);
    if otlp_enabled() {
        // This request's span continues the caller's trace: it is the upstream's parent.
        headers.extend(current_trace_headers());
        headers.push(("x-request-id", request_id.to_owned()));
        return headers;
    }
    let traceparent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| valid_traceparent(v));
    if let Some(parent) = traceparent {
        headers.push(("traceparent", parent.to_owned()));
        // tracestate is only meaningful beside a traceparent (W3C Trace Context §3.3).
        let state: Vec<&str> =
            req.headers().get_all("tracestate").filter_map(|v| v.to_str().ok()).collect();
        let state = state.join(",");
        if !state.is_empty() && state.len() <= 512 {
            headers.push(("tracestate", state));
        }
    }
    headers.push(("x-request-id", request_id.to_owned()));
    headers
}

/// A W3C `traceparent` (Trace Context §3.2) of version `00`: `00-<32 hex>-<16 hex>-<2 hex>`,
/// trace and parent ids not all zeros; lowercase hex.
pub fn valid_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && parts[1].bytes().any(|b| b != b'0')
        && hex(parts[2], 16)
        && parts[2].bytes().any(|b| b != b'0')
        && hex(parts[3], 2)
}

/// A bounded `method` label: the standard methods, else `other`.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Middleware, outermost: gives each request its id (a UUIDv7, in the `x-request-id` answer
/// header, error bodies and every log line of the request), and once the answer's last byte
/// is sent (or the client went away) writes one access-log line and counts the request in
/// `aigw_http_requests_total` and `aigw_http_request_duration_seconds`.
///
/// The line (target `aigw::access`, message `access`) carries `method`, `route` (the route
/// template, `unmatched` for none), `path`, `status`, `duration_ms`, `bytes` (body bytes
/// sent), `request_id`, `client_ip`, and who called (`user_id`, `session_id`, `key_id`), plus
/// `proxy_request_id` when a trusted proxy sent an `x-request-id`. 5xx answers are logged at
/// `error` with their `cause`; everything else at `info`.
///
/// # Errors
/// None of its own: an error of the wrapped service is turned into its answer here.
pub async fn access_log(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<AccessLogged>, actix_web::Error> {
    let arrived = Instant::now();
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let id = uuid::Uuid::now_v7().to_string();
    let mut entry = AccessEntry {
        arrived,
        method: method_label(req.method()),
        route: req.match_pattern(),
        path: req.path().chars().take(256).collect(),
        status: 0,
        request_id: id.clone(),
        proxy_request_id: proxy_request_id(&req, state.as_ref().map(|s| s.get_ref())),
        client_ip: state.as_ref().map(|s| s.limits.client_ip(req.request()).to_string()),
        caller: None,
        cause: None,
        metrics: state.as_ref().map(|s| s.telemetry.metrics.clone()).unwrap_or_default(),
        server: state.as_ref().map_or(0, |s| s.telemetry.id()),
        bytes: 0,
        span: tracing::Span::none(),
    };
    req.extensions_mut().insert(Arrival(arrived));
    let span = if request_spans() {
        tracing::info_span!(
            "request",
            request_id = id.as_str(),
            otel.name = tracing::field::Empty,
            otel.kind = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
        )
    } else {
        tracing::Span::none()
    };
    if otlp_enabled() {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let route = entry.route.as_deref().unwrap_or("unmatched");
        span.record("otel.name", format!("{} {route}", entry.method));
        span.record("otel.kind", "server");
        let _ = span.set_parent(caller_context(req.headers()));
    }
    // Held by the access entry: the span ends with the answer's last byte, not its head.
    let request_span = span.clone();
    let audit = audit_context(&req, entry.client_ip.clone(), &id);
    let handled = aigw_service::admin::audit::with_context(
        audit,
        REQUEST_ID.scope(id.clone(), next.call(req)),
    );
    let handled = if span.is_none() { handled.await } else { handled.instrument(span).await };
    let mut response = match handled {
        Ok(response) => response.map_into_boxed_body(),
        Err(e) => {
            // Turned into its answer by actix-web outside this middleware: logged here.
            entry.status = e.as_response_error().status_code().as_u16();
            entry.cause = Some(e.to_string());
            drop(entry);
            return Err(e);
        }
    };
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(X_REQUEST_ID, value);
    }
    entry.status = response.status().as_u16();
    if otlp_enabled() {
        request_span.record("http.response.status_code", entry.status);
    }
    entry.caller = response.request().extensions().get::<CallerIds>().cloned();
    entry.cause = response.response().extensions().get::<ErrorCause>().map(|c| c.0.clone());
    entry.span = request_span;
    Ok(response.map_body(|_, body| AccessLogged { body, entry: Some(entry) }))
}

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// What the access-log line of one request says; written when it is dropped.
struct AccessEntry {
    arrived: Instant,
    method: &'static str,
    route: Option<String>,
    path: String,
    status: u16,
    request_id: String,
    proxy_request_id: Option<String>,
    client_ip: Option<String>,
    caller: Option<CallerIds>,
    cause: Option<String>,
    metrics: Metrics,
    /// The server whose `metrics` these are (`Telemetry::id`; 0 without a server).
    server: u64,
    bytes: u64,
    /// The request's span, closed when the entry is written.
    span: tracing::Span,
}

impl Drop for AccessEntry {
    fn drop(&mut self) {
        let elapsed = self.arrived.elapsed();
        let route = self.route.as_deref().unwrap_or("unmatched");
        let class = aigw_service::metrics::status_class(self.status);
        let authentication = self
            .caller
            .as_ref()
            .map(|caller| (caller.credential, if self.status == 403 { "forbidden" } else { "ok" }));
        count_request(
            &self.metrics,
            self.server,
            (route, self.method, class),
            elapsed.as_secs_f64(),
            authentication,
        );
        // Milliseconds with microsecond precision (`0.61`, not `0.6099999999999999`).
        let duration_ms = (elapsed.as_secs_f64() * 1e6).round() / 1000.0;
        let user_id = self.caller.as_ref().map(|c| c.user_id.as_str());
        let session_id = self.caller.as_ref().and_then(|c| c.session_id.as_deref());
        let key_id = self.caller.as_ref().and_then(|c| c.key_id.as_deref());
        macro_rules! line {
            ($level:expr) => {
                tracing::event!(
                    target: "aigw::access",
                    $level,
                    method = self.method,
                    route,
                    path = self.path.as_str(),
                    status = self.status,
                    duration_ms,
                    bytes = self.bytes,
                    request_id = self.request_id.as_str(),
                    proxy_request_id = self.proxy_request_id.as_deref(),
                    client_ip = self.client_ip.as_deref(),
                    user_id,
                    session_id,
                    key_id,
                    cause = self.cause.as_deref(),
                    "access"
                )
            };
        }
        if self.status >= 500 {
            line!(tracing::Level::ERROR);
        } else {
            line!(tracing::Level::INFO);
        }
    }
}

/// The access log's metric handles of one server on one thread, looked up in the recorder at
/// their first use instead of per request. A lookup builds the series' key (its labels
/// copied) and takes a read lock on a shard of the recorder's map and two reference counts,
/// all shared by every worker thread: the three series of a request measured 0.30 µs on one
/// thread and 0.88 µs on each of two at once (`cargo bench -p aigw-infra --bench
/// request_metrics`), against 0.04 µs and 0.06 µs with the handles kept.
#[derive(Default)]
struct AccessHandles {
    /// By route template.
    routes: std::collections::HashMap<String, RouteHandles>,
    /// `aigw_authentications_total` by credential and outcome.
    authentications: std::collections::HashMap<(&'static str, &'static str), metrics::Counter>,
}

struct RouteHandles {
    /// `aigw_http_request_duration_seconds`.
    duration: metrics::Histogram,
    /// `aigw_http_requests_total` by method and status class.
    requests: std::collections::HashMap<(&'static str, &'static str), metrics::Counter>,
}

thread_local! {
    /// This thread's access-log handles, by server (`Telemetry::id`).
    static ACCESS_HANDLES: std::cell::RefCell<std::collections::HashMap<u64, AccessHandles>> =
        std::cell::RefCell::default();
}

/// Counts one request of `route`, `method` and status `class` in `aigw_http_requests_total`
/// and its duration (`seconds`) in `aigw_http_request_duration_seconds`, and its caller's
/// `(credential, outcome)` in `aigw_authentications_total`, through this thread's handles of
/// `server`'s recorder `m`.
fn count_request(
    m: &Metrics,
    server: u64,
    (route, method, class): (&str, &'static str, &'static str),
    seconds: f64,
    authentication: Option<(&'static str, &'static str)>,
) {
    let requests = |m: &Metrics| {
        m.counter(
            "aigw_http_requests_total",
            &[("route", route), ("method", method), ("status_class", class)],
        )
    };
    let duration =
        |m: &Metrics| m.histogram("aigw_http_request_duration_seconds", &[("route", route)]);
    let authentications = |m: &Metrics, (credential, outcome)| {
        m.counter("aigw_authentications_total", &[("credential", credential), ("outcome", outcome)])
    };
    let kept = server != 0
        && ACCESS_HANDLES
            .try_with(|handles| {
                let mut handles = handles.borrow_mut();
                let handles = handles.entry(server).or_default();
                if !handles.routes.contains_key(route) {
                    let route_handles =
                        RouteHandles { duration: duration(m), requests: Default::default() };
                    handles.routes.insert(route.to_owned(), route_handles);
                }
                if let Some(route_handles) = handles.routes.get_mut(route) {
                    route_handles
                        .requests
                        .entry((method, class))
                        .or_insert_with(|| requests(m))
                        .increment(1);
                    route_handles.duration.record(seconds);
                }
                if let Some(authentication) = authentication {
                    handles
                        .authentications
                        .entry(authentication)
                        .or_insert_with(|| authentications(m, authentication))
                        .increment(1);
                }
            })
            .is_ok();
    if !kept {
        // No server, or this thread's locals are being torn down: looked up per event.
        requests(m).increment(1);
        duration(m).record(seconds);
        if let Some(authentication) = authentication {
            authentications(m, authentication).increment(1);
        }
    }
}

/// An answer body that counts its bytes and writes the request's access-log line once its
/// last byte is handed to the connection (before it is flushed, so a client that reads the
/// answer and then `/metrics` finds the request counted), or when it is dropped unsent (a
/// `HEAD`, an empty body, a client that went away).
pub struct AccessLogged {
    body: BoxBody,
    entry: Option<AccessEntry>,
}

impl std::fmt::Debug for AccessLogged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLogged").finish_non_exhaustive()
    }
}

impl MessageBody for AccessLogged {
    type Error = <BoxBody as MessageBody>::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(entry) = this.entry.as_mut() {
                    entry.bytes += chunk.len() as u64;
                }
            }
            // The end (or a broken stream): the line is written as the entry drops.
            Poll::Ready(None | Some(Err(_))) => drop(this.entry.take()),
            Poll::Pending => {}
        }
        polled
    }
}

/// Where `req` comes from, for the audit trail: the client address `ip` (as the access log has
/// it, by the trusted-proxy rules), the `User-Agent` (cut to 256 characters) and the request id.
fn audit_context(
    req: &ServiceRequest,
    ip: Option<String>,
    request_id: &str,
) -> aigw_service::admin::audit::AuditContext {
    let client = aigw_service::ClientInfo::new(
        ip,
        req.headers().get(actix_web::http::header::USER_AGENT).and_then(|v| v.to_str().ok()),
    );
    aigw_service::admin::audit::AuditContext {
        ip: client.ip,
        user_agent: client.user_agent,
        request_id: Some(request_id.to_owned()),
    }
}
