//! Prometheus metrics: one recorder per server, rendered at `GET /metrics` (on
//! `server.listen`, or only on `server.metrics_listen` when that is set).
//!
//! Events are counted where they happen (the access log middleware, handlers, the service's
//! gateway, refresh rotation and usage recorder, all through [`Metrics`]); capacity gauges
//! (database pool, argon2 queue, change-feed lag, Redis, usage queue) are read when the
//! exposition is rendered. [`CATALOGUE`] names every metric with its labels and help text;
//! docs/operations.md lists the same (a test compares them).

use crate::startup::AppState;
use actix_web::{web, HttpResponse};
use aigw_service::Metrics;
use metrics::Recorder;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::Arc;
use std::time::Duration;

/// Prometheus' text exposition format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What kind of series a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// A value now.
    Gauge,
    /// Observations in buckets (seconds).
    Histogram,
}

/// One metric: name, kind, label names, help text.
pub type MetricSpec = (&'static str, Kind, &'static [&'static str], &'static str);

/// Every metric aigw exports, with its labels (all from small fixed sets or configuration).
pub const CATALOGUE: &[MetricSpec] = &[
    ("aigw_http_requests_total", Kind::Counter, &["route", "method", "status_class"],
        "HTTP requests answered, by route template, method and status class"),
    ("aigw_http_request_duration_seconds", Kind::Histogram, &["route"],
        "Time from a request's arrival to its answer's last byte, by route template"),
    ("aigw_authentications_total", Kind::Counter, &["credential", "outcome"],
        "Credentials checked on authenticated endpoints, by kind (access_token, api_key, none, malformed) and outcome (ok, invalid, expired, revoked, missing, forbidden)"),
    ("aigw_logins_total", Kind::Counter, &["outcome"],
        "Logins by outcome (ok, invalid, rate_limited, bad_request, error)"),
    ("aigw_refresh_total", Kind::Counter, &["outcome"],
        "Refresh-token exchanges by outcome: rotated, replayed (grace window), reused (reuse detected: the session was revoked), invalid, error"),
    ("aigw_sessions_created_total", Kind::Counter, &[],
        "Sessions started (registrations and logins)"),
    ("aigw_sessions_revoked_total", Kind::Counter, &["reason"],
        "Sessions ended by logout (reason logout); reuse revocations are aigw_refresh_total{outcome=\"reused\"}"),
    ("aigw_api_keys_created_total", Kind::Counter, &[], "API keys created"),
    ("aigw_api_keys_revoked_total", Kind::Counter, &["how"],
        "API keys revoked or deleted (how: revoke, delete)"),
    ("aigw_connections_refused_total", Kind::Counter, &["reason"],
        "Client connections refused by a per-address cap, by the setting that refused: max_connections_per_address (closed as soon as accepted), max_pending_requests_per_address (a request whose body was still arriving, answered 429 and its connection closed)"),
    ("aigw_limit_refusals_total", Kind::Counter, &["scope", "reason"],
        "Gateway calls refused by a limit of the key or its team, by level (scope: key, member, team) and limit (reason: budget, rate: an rpm_limit or tpm_limit)"),
    ("aigw_rate_limited_total", Kind::Counter, &["policy"],
        "Requests refused with 429 by a rate-limit policy"),
    ("aigw_rate_limit_memory_fallbacks_total", Kind::Counter, &[],
        "Calls decided without Redis because it was unavailable: rate-limit checks decided by this node's memory, and admissions of keys' budgets and rpm/tpm decided by the database counters"),
    ("aigw_redis_up", Kind::Gauge, &[],
        "1 while the last call to the node's Redis (rate limits, key counters) succeeded, 0 while it fails (absent without Redis)"),
    ("aigw_upstream_requests_total", Kind::Counter, &["provider", "model", "status_class"],
        "Calls to upstream providers by provider, model and status class (2xx..5xx, error: no answer, timeout)"),
    ("aigw_upstream_duration_seconds", Kind::Histogram, &["provider", "model"],
        "Upstream latency: from sending the request to the answer's last byte (a stream: its end)"),
    ("aigw_upstream_ttfb_seconds", Kind::Histogram, &["provider", "model"],
        "Upstream time to first byte: from sending the request to the answer's head"),
    ("aigw_gateway_overhead_seconds", Kind::Histogram, &["provider"],
        "Time a chat call spends in aigw before the upstream call: from the request's arrival (authentication, rate limit, body, validation, metering) to the upstream send"),
    ("aigw_tokens_total", Kind::Counter, &["provider", "model", "kind"],
        "Tokens metered into the usage ledger, by provider, model and kind (prompt, completion)"),
    ("aigw_cost_usd_micros_total", Kind::Counter, &["provider", "model"],
        "Cost metered into the usage ledger, in micro-USD, by provider and model"),
    ("aigw_db_pool_connections_in_use", Kind::Gauge, &[], "Database connections in use"),
    ("aigw_db_pool_waiting", Kind::Gauge, &[], "Database calls waiting for a connection"),
    ("aigw_db_pool_size", Kind::Gauge, &[], "Most database connections (database.max_connections)"),
    ("aigw_argon2_queue_length", Kind::Gauge, &[],
        "Password hashes waiting for a hashing thread"),
    ("aigw_argon2_in_flight", Kind::Gauge, &[], "Password hashes running or waiting"),
    ("aigw_change_feed_lag_seconds", Kind::Gauge, &[],
        "Seconds since this node last read the credential change feed"),
    ("aigw_usage_queue_length", Kind::Gauge, &[],
        "Metered calls not yet written to the database or spool"),
    ("aigw_usage_spooled_records", Kind::Gauge, &[],
        "Metered calls waiting in the spool file for the database"),
    ("aigw_usage_flushes_total", Kind::Counter, &[],
        "Usage flushes written to the database (one transaction each)"),
    ("aigw_usage_recorded_total", Kind::Counter, &[],
        "Metered calls written to the database"),
    ("aigw_usage_records_dropped_total", Kind::Counter, &[],
        "Per-request usage records dropped because memory for them was full (their calls still counted)"),
    ("aigw_usage_lost_total", Kind::Counter, &[],
        "Metered calls that could be written neither to the database nor to the spool file"),
];

/// Latency buckets in seconds (0.5 ms to 60 s).
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// A server's metrics: the recorder handle the code records into, and its renderer.
#[derive(Clone)]
pub struct Telemetry {
    /// Where events are counted.
    pub metrics: Metrics,
    handle: PrometheusHandle,
    /// Tells this server's recorder from others' in the process (the access log keeps its
    /// metric handles per thread, by server).
    id: u64,
}

/// The next [`Telemetry`]'s id.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

/// How often histogram samples are drained into their buckets. The recorder keeps every
/// sample (8 bytes, in blocks of 64) until then: four histograms per chat call at 25 000 calls
/// a second held about 7 MiB between drains 5 s apart (docs/performance.md), against about
/// 0.3 MiB at this interval. A drain costs a few microseconds per histogram series.
const UPKEEP_EVERY: Duration = Duration::from_millis(200);

impl Telemetry {
    /// A fresh recorder (not the process-wide one: each server counts its own).
    ///
    /// # Errors
    /// When the histogram buckets are refused (never with the built-in ones).
    pub fn new() -> anyhow::Result<Self> {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), BUCKETS)?
            .build_recorder();
        for (name, kind, _, help) in CATALOGUE {
            let key = metrics::KeyName::from_const_str(name);
            let help = metrics::SharedString::const_str(help);
            match kind {
                Kind::Counter => recorder.describe_counter(key, None, help),
                Kind::Gauge => recorder.describe_gauge(key, None, help),
                Kind::Histogram => {
                    recorder.describe_histogram(key, Some(metrics::Unit::Seconds), help);
                }
            }
        }
        let handle = recorder.handle();
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Self { metrics: Metrics::new(Arc::new(recorder)), handle, id })
    }

    /// This server's id, unique in the process (never 0).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Drains histogram samples into their buckets every [`UPKEEP_EVERY`], for as long as the
    /// returned task runs (abort it when the server stops).
    pub fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()> {
        let handle = self.handle.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(UPKEEP_EVERY);
            loop {
                tick.tick().await;
                handle.run_upkeep();
            }
        })
    }

    /// Reads the capacity gauges of `state`, then renders the exposition.
    pub fn render(&self, state: &AppState) -> String {
        let m = &self.metrics;
        let (in_use, waiting, size) = state.auth.db().load();
        m.gauge("aigw_db_pool_connections_in_use", &[], in_use as f64);
        m.gauge("aigw_db_pool_waiting", &[], waiting as f64);
        m.gauge("aigw_db_pool_size", &[], size as f64);
        let (in_flight, threads) = state.auth.password_queue();
        m.gauge("aigw_argon2_in_flight", &[], in_flight as f64);
        m.gauge("aigw_argon2_queue_length", &[], in_flight.saturating_sub(threads) as f64);
        let feed = state.auth.credential_cache().health();
        m.gauge("aigw_change_feed_lag_seconds", &[], feed.lag_ms as f64 / 1000.0);
        let limiter = state.limits.limiter();
        if let Some(up) = limiter.redis_available() {
            m.gauge("aigw_redis_up", &[], if up { 1.0 } else { 0.0 });
            m.counter("aigw_rate_limit_memory_fallbacks_total", &[])
                .absolute(limiter.memory_fallbacks());
        }
        if let Some(h) = state.usage.health() {
            m.gauge("aigw_usage_queue_length", &[], h.queued as f64);
            m.gauge("aigw_usage_spooled_records", &[], h.spooled as f64);
            m.counter("aigw_usage_flushes_total", &[]).absolute(h.flushes);
            m.counter("aigw_usage_recorded_total", &[]).absolute(h.recorded);
            m.counter("aigw_usage_records_dropped_total", &[]).absolute(h.records_dropped);
            m.counter("aigw_usage_lost_total", &[]).absolute(h.lost);
        }
        self.handle.render()
    }
}

/// `GET /metrics`: the Prometheus exposition of this server (docs/operations.md lists every
/// metric). Not served here when `server.metrics_listen` is set.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4 (docs/operations.md)",
        content_type = "text/plain; version=0.0.4; charset=utf-8", body = String)))]
pub async fn serve(state: web::Data<AppState>) -> HttpResponse {
    let body = state.telemetry.render(&state);
    HttpResponse::Ok().content_type(CONTENT_TYPE).body(body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]
    use super::*;

    /// docs/operations.md has a row for every metric, naming each of its labels.
    #[test]
    fn operations_doc_lists_every_metric_and_label() {
        let doc = include_str!("../../../docs/operations.md");
        for (name, kind, labels, _) in CATALOGUE {
            let row = doc
                .lines()
                .find(|l| l.starts_with(&format!("| `{name}` |")))
                .unwrap_or_else(|| panic!("docs/operations.md has no row for {name}"));
            let kind = match kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            assert!(row.contains(&format!("| {kind} |")), "{name} is a {kind}: {row}");
            for label in *labels {
                assert!(row.contains(&format!("`{label}`")), "{name} lacks label {label}: {row}");
            }
        }
    }

    #[test]
    fn histograms_are_in_seconds_and_counters_end_in_total() {
        for (name, kind, ..) in CATALOGUE {
            match kind {
                Kind::Histogram => assert!(name.ends_with("_seconds"), "{name}"),
                Kind::Counter => assert!(name.ends_with("_total"), "{name}"),
                Kind::Gauge => assert!(!name.ends_with("_total"), "{name}"),
            }
        }
    }
}
