//! The access log: one line per request, written once the answer's last byte is sent, with
//! the request's metrics; and the request extensions it reads (who called, when the request
//! arrived).

use crate::error::ErrorCause;
use crate::observe::metric;
use crate::request_id::{self, REQUEST_ID, X_REQUEST_ID};
use crate::state::AppState;
use crate::telemetry;
use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::HeaderValue;
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage};
use aigw_service::Metrics;
use bytes::Bytes;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;
use tracing::Instrument;

/// Who a request authenticated as, for the access log: ids only, never a secret. Put in the
/// request's extensions by the [`crate::extract::Authorized`] and
/// [`crate::extract::AdminCaller`] extractors.
#[derive(Debug, Clone)]
pub(crate) struct CallerIds {
    /// `access_token` or `api_key`.
    pub(crate) credential: &'static str,
    /// The user.
    pub(crate) user_id: String,
    /// The session of an access token.
    pub(crate) session_id: Option<String>,
    /// The API key.
    pub(crate) key_id: Option<String>,
}

impl CallerIds {
    /// The ids of `principal`.
    pub(crate) fn of(principal: &aigw_service::Principal) -> Self {
        match principal {
            aigw_service::Principal::User { user_id, session_id, .. } => Self {
                credential: "access_token",
                user_id: user_id.as_str().to_owned(),
                session_id: Some(session_id.as_str().to_owned()),
                key_id: None,
            },
            aigw_service::Principal::ApiKey { key_id, user_id, .. } => Self {
                credential: "api_key",
                user_id: user_id.as_str().to_owned(),
                session_id: None,
                key_id: Some(key_id.as_str().to_owned()),
            },
        }
    }
}

/// When the request arrived (request extension; the gateway's overhead is measured from it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival(pub(crate) Instant);

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
pub(crate) async fn access_log(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<AccessLogged>, actix_web::Error> {
    let arrived = Instant::now();
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let id = request_id::new_request_id();
    let mut entry = AccessEntry {
        arrived,
        method: method_label(req.method()),
        route: req.match_pattern(),
        path: req.path().chars().take(256).collect(),
        status: 0,
        request_id: id.clone(),
        proxy_request_id: state.as_ref().and_then(|s| {
            let trusted = s.limits.is_from_trusted_proxy(req.request());
            request_id::proxy_request_id(req.headers(), trusted)
        }),
        client_ip: state.as_ref().map(|s| s.limits.client_ip(req.request()).to_string()),
        caller: None,
        cause: None,
        metrics: state.as_ref().map(|s| s.telemetry.metrics.clone()).unwrap_or_default(),
        server: state.as_ref().map_or(0, |s| s.telemetry.id()),
        bytes: 0,
        span: tracing::Span::none(),
    };
    req.extensions_mut().insert(Arrival(arrived));
    let span = if telemetry::request_spans() {
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
    if telemetry::otlp_enabled() {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let route = entry.route.as_deref().unwrap_or("unmatched");
        span.record("otel.name", format!("{} {route}", entry.method));
        span.record("otel.kind", "server");
        let _ = span.set_parent(telemetry::caller_context(req.headers()));
    }
    // Held by the access entry: the span ends with the answer's last byte, not its head.
    let request_span = span.clone();
    let audit = audit_context(&req, entry.client_ip.clone(), &id);
    let handled =
        aigw_service::audit::with_context(audit, REQUEST_ID.scope(id.clone(), next.call(req)));
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
    if telemetry::otlp_enabled() {
        request_span.record("http.response.status_code", entry.status);
    }
    entry.caller = response.request().extensions().get::<CallerIds>().cloned();
    entry.cause = response.response().extensions().get::<ErrorCause>().map(|c| c.0.clone());
    entry.span = request_span;
    Ok(response.map_body(|_, body| AccessLogged { body, entry: Some(entry) }))
}

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
            metric::HTTP_REQUESTS_TOTAL,
            &[("route", route), ("method", method), ("status_class", class)],
        )
    };
    let duration =
        |m: &Metrics| m.histogram(metric::HTTP_REQUEST_DURATION_SECONDS, &[("route", route)]);
    let authentications = |m: &Metrics, (credential, outcome)| {
        m.counter(
            metric::AUTHENTICATIONS_TOTAL,
            &[("credential", credential), ("outcome", outcome)],
        )
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
pub(crate) struct AccessLogged {
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
) -> aigw_service::audit::AuditContext {
    let client = aigw_service::ClientInfo::new(
        ip,
        req.headers().get(actix_web::http::header::USER_AGENT).and_then(|v| v.to_str().ok()),
    );
    aigw_service::audit::AuditContext {
        ip: client.ip,
        user_agent: client.user_agent,
        request_id: Some(request_id.to_owned()),
    }
}
