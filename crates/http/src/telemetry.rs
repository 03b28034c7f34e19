//! Structured logs (`tracing`) and traces: the global subscriber and its log writer, the
//! OTLP span exporter, and the W3C trace context a chat call passes upstream. The request id
//! and the access log are request-scoped: `crate::middleware`.

use crate::request_id::REQUEST_ID;
use crate::settings::{LogFormat, LogSettings, TelemetrySettings};
use actix_web::http::header::HeaderName;
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

pub(crate) fn otlp_enabled() -> bool {
    OTLP.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether each request gets a tracing span: for OTLP export, and for the text format, which
/// shows a line's spans. JSON lines do without one (`aigw_infra::log_format::JsonLines` writes the
/// request's id from its task-local instead): building, entering and closing a span per request
/// was about 3 % of a chat call's instructions (callgrind, docs/performance.md).
static REQUEST_SPANS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn request_spans() -> bool {
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
pub(crate) fn caller_context(
    headers: &actix_web::http::header::HeaderMap,
) -> opentelemetry::Context {
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

/// The headers a chat call sends upstream besides its body (`aigw_service::gateway::
/// FORWARDED_HEADERS`): the caller's W3C `traceparent` and `tracestate`, when well-formed, so
/// the upstream continues the caller's trace, and `x-request-id` with this request's id.
pub(crate) fn upstream_headers(
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
pub(crate) fn valid_traceparent(value: &str) -> bool {
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
