//! Prometheus metrics: one recorder per server, rendered at `GET /metrics` (on
//! `server.listen`, or only on `server.metrics_listen` when that is set; the handler is
//! `crate::routes::health::metrics`).
//!
//! Events are counted where they happen (the access log middleware, handlers, the service's
//! gateway, refresh rotation and usage recorder, all through [`Metrics`]); capacity gauges
//! (database pool, argon2 queue, change-feed lag, Redis, usage queue) are read when the
//! exposition is rendered. [`CATALOGUE`] names every metric with its labels and help text;
//! docs/operations.md lists the same (a test compares them). Code names a metric only through
//! its constant: `metric` here, `aigw_service::metrics::name` in the use cases.

use aigw_service::{Metrics, RateLimiter, ServiceContext, UsageService};
use metrics::Recorder;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::Arc;
use std::time::Duration;

/// Prometheus' text exposition format, version 0.0.4.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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

/// The metric names, one constant per row of [`CATALOGUE`] (the name without `aigw_`, in
/// capitals): the code that records a metric names it through these. Those the use cases
/// record are `aigw_service::metrics::name`'s, named here too.
pub(crate) mod metric {
    pub(crate) use aigw_service::metrics::name::*;
    pub(crate) const HTTP_REQUESTS_TOTAL: &str = "aigw_http_requests_total";
    pub(crate) const HTTP_REQUEST_DURATION_SECONDS: &str = "aigw_http_request_duration_seconds";
    pub(crate) const AUTHENTICATIONS_TOTAL: &str = "aigw_authentications_total";
    pub(crate) const LOGINS_TOTAL: &str = "aigw_logins_total";
    pub(crate) const SESSIONS_CREATED_TOTAL: &str = "aigw_sessions_created_total";
    pub(crate) const SESSIONS_REVOKED_TOTAL: &str = "aigw_sessions_revoked_total";
    pub(crate) const CONNECTIONS_REFUSED_TOTAL: &str = "aigw_connections_refused_total";
    pub(crate) const RATE_LIMITED_TOTAL: &str = "aigw_rate_limited_total";
    pub(crate) const RATE_LIMIT_MEMORY_FALLBACKS_TOTAL: &str =
        "aigw_rate_limit_memory_fallbacks_total";
    pub(crate) const REDIS_UP: &str = "aigw_redis_up";
    pub(crate) const DB_POOL_CONNECTIONS_IN_USE: &str = "aigw_db_pool_connections_in_use";
    pub(crate) const DB_POOL_WAITING: &str = "aigw_db_pool_waiting";
    pub(crate) const DB_POOL_SIZE: &str = "aigw_db_pool_size";
    pub(crate) const ARGON2_QUEUE_LENGTH: &str = "aigw_argon2_queue_length";
    pub(crate) const ARGON2_IN_FLIGHT: &str = "aigw_argon2_in_flight";
    pub(crate) const CHANGE_FEED_LAG_SECONDS: &str = "aigw_change_feed_lag_seconds";
    pub(crate) const USAGE_QUEUE_LENGTH: &str = "aigw_usage_queue_length";
    pub(crate) const USAGE_SPOOLED_RECORDS: &str = "aigw_usage_spooled_records";
    pub(crate) const USAGE_FLUSHES_TOTAL: &str = "aigw_usage_flushes_total";
    pub(crate) const USAGE_RECORDED_TOTAL: &str = "aigw_usage_recorded_total";
    pub(crate) const USAGE_RECORDS_DROPPED_TOTAL: &str = "aigw_usage_records_dropped_total";
    pub(crate) const USAGE_LOST_TOTAL: &str = "aigw_usage_lost_total";
}

/// Every metric aigw exports, with its labels (all from small fixed sets or configuration).
pub const CATALOGUE: &[MetricSpec] = &[
    (metric::HTTP_REQUESTS_TOTAL, Kind::Counter, &["route", "method", "status_class"],
        "HTTP requests answered, by route template, method and status class"),
    (metric::HTTP_REQUEST_DURATION_SECONDS, Kind::Histogram, &["route"],
        "Time from a request's arrival to its answer's last byte, by route template"),
    (metric::AUTHENTICATIONS_TOTAL, Kind::Counter, &["credential", "outcome"],
        "Credentials checked on authenticated endpoints, by kind (access_token, api_key, none, malformed) and outcome (ok, invalid, expired, revoked, missing, forbidden)"),
    (metric::LOGINS_TOTAL, Kind::Counter, &["outcome"],
        "Logins by outcome (ok, invalid, rate_limited, bad_request, error)"),
    (metric::REFRESH_TOTAL, Kind::Counter, &["outcome"],
        "Refresh-token exchanges by outcome: rotated, replayed (grace window), reused (reuse detected: the session was revoked), invalid, error"),
    (metric::SESSIONS_CREATED_TOTAL, Kind::Counter, &[],
        "Sessions started (registrations and logins)"),
    (metric::SESSIONS_REVOKED_TOTAL, Kind::Counter, &["reason"],
        "Sessions ended by logout (reason logout); reuse revocations are aigw_refresh_total{outcome=\"reused\"}"),
    (metric::API_KEYS_CREATED_TOTAL, Kind::Counter, &[], "API keys created"),
    (metric::API_KEYS_REVOKED_TOTAL, Kind::Counter, &["how"],
        "API keys revoked or deleted (how: revoke, delete)"),
    (metric::CONNECTIONS_REFUSED_TOTAL, Kind::Counter, &["reason"],
        "Client connections refused by a per-address cap, by the setting that refused: max_connections_per_address (closed as soon as accepted), max_pending_requests_per_address (a request whose body was still arriving, answered 429 and its connection closed)"),
    (metric::LIMIT_REFUSALS_TOTAL, Kind::Counter, &["scope", "reason"],
        "Gateway calls refused by a limit of the key or its team, by level (scope: key, member, team, user) and limit (reason: budget, rate: an rpm_limit or tpm_limit)"),
    (metric::RATE_LIMITED_TOTAL, Kind::Counter, &["policy"],
        "Requests refused with 429 by a rate-limit policy"),
    (metric::RATE_LIMIT_MEMORY_FALLBACKS_TOTAL, Kind::Counter, &[],
        "Calls decided without Redis because it was unavailable: rate-limit checks decided by this node's memory, and admissions of keys' budgets and rpm/tpm decided by the database counters"),
    (metric::BUDGET_ALERTS_TOTAL, Kind::Counter, &["scope", "threshold"],
        "Budget alerts sent by this node, by level (scope: key, member, team, user) and threshold (percent); each alert is sent by one node only"),
    (metric::TEAM_BUDGET_USED_RATIO, Kind::Gauge, &["team_id"],
        "A team's spend in its current budget period over its budget (1 = all of it), updated when its spend is written; at most alerts.team_gauges teams per node"),
    (metric::WEBHOOK_DELIVERIES_TOTAL, Kind::Counter, &["outcome"],
        "Webhook delivery attempts by outcome: delivered (a 2xx), retried (failed, tried again later), failed (the last attempt failed)"),
    (metric::REDIS_UP, Kind::Gauge, &[],
        "1 while the last call to the node's Redis (rate limits, key counters) succeeded, 0 while it fails (absent without Redis)"),
    (metric::UPSTREAM_REQUESTS_TOTAL, Kind::Counter, &["provider", "model", "status_class"],
        "Calls to upstream providers by provider, model and status class (2xx..5xx, error: no answer, timeout)"),
    (metric::UPSTREAM_ATTEMPTS_TOTAL, Kind::Counter, &["deployment", "outcome"],
        "Upstream attempts by deployment ({provider}/{model}) and outcome (ok; failed: a connect error, a timeout, a 429 or 5xx, whether retried or not; refused: a 4xx passed to the caller)"),
    (metric::BREAKER_STATE, Kind::Gauge, &["deployment"],
        "Each deployment's circuit breaker on this node: 0 closed, 1 open, 2 half open (set when it changes)"),
    (metric::FALLBACKS_TOTAL, Kind::Counter, &["model", "fallback"],
        "Fallbacks taken: calls to model answered by trying fallback after its deployments failed"),
    (metric::UPSTREAM_DURATION_SECONDS, Kind::Histogram, &["provider", "model"],
        "Upstream latency: from sending the request to the answer's last byte (a stream: its end)"),
    (metric::UPSTREAM_TTFB_SECONDS, Kind::Histogram, &["provider", "model"],
        "Upstream time to first byte: from sending the request to the answer's head"),
    (metric::GATEWAY_OVERHEAD_SECONDS, Kind::Histogram, &["provider"],
        "Time a chat call spends in aigw before the upstream call: from the request's arrival (authentication, rate limit, body, validation, metering) to the upstream send"),
    (metric::TOKENS_TOTAL, Kind::Counter, &["provider", "model", "kind"],
        "Tokens metered into the usage ledger, by provider, model and kind (prompt, completion)"),
    (metric::COST_USD_MICROS_TOTAL, Kind::Counter, &["provider", "model"],
        "Cost metered into the usage ledger, in micro-USD, by provider and model"),
    (metric::EMAILS_TOTAL, Kind::Counter, &["kind", "outcome"],
        "Account messages by kind (verify_email, change_email, email_changed, password_reset, password_changed, key_leaked) and outcome (sent, retried, failed, dropped)"),
    (metric::DB_POOL_CONNECTIONS_IN_USE, Kind::Gauge, &[], "Database connections in use"),
    (metric::DB_POOL_WAITING, Kind::Gauge, &[], "Database calls waiting for a connection"),
    (metric::DB_POOL_SIZE, Kind::Gauge, &[], "Most database connections (database.max_connections)"),
    (metric::ARGON2_QUEUE_LENGTH, Kind::Gauge, &[],
        "Password hashes waiting for a hashing thread"),
    (metric::ARGON2_IN_FLIGHT, Kind::Gauge, &[], "Password hashes running or waiting"),
    (metric::CHANGE_FEED_LAG_SECONDS, Kind::Gauge, &[],
        "Seconds since this node last read the credential change feed"),
    (metric::USAGE_QUEUE_LENGTH, Kind::Gauge, &[],
        "Metered calls not yet written to the database or spool"),
    (metric::USAGE_SPOOLED_RECORDS, Kind::Gauge, &[],
        "Metered calls waiting in the spool file for the database"),
    (metric::USAGE_FLUSHES_TOTAL, Kind::Counter, &[],
        "Usage flushes written to the database (one transaction each)"),
    (metric::USAGE_RECORDED_TOTAL, Kind::Counter, &[],
        "Metered calls written to the database"),
    (metric::USAGE_RECORDS_DROPPED_TOTAL, Kind::Counter, &[],
        "Per-request usage records dropped because memory for them was full (their calls still counted)"),
    (metric::USAGE_LOST_TOTAL, Kind::Counter, &[],
        "Metered calls that could be written neither to the database nor to the spool file"),
];

/// Latency buckets in seconds (0.5 ms to 60 s).
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// A server's metrics: the recorder handle the code records into, and its renderer.
#[derive(Clone)]
pub(crate) struct Telemetry {
    /// Where events are counted.
    pub(crate) metrics: Metrics,
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
    pub(crate) fn new() -> anyhow::Result<Self> {
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
    pub(crate) fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()> {
        let handle = self.handle.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(UPKEEP_EVERY);
            loop {
                tick.tick().await;
                handle.run_upkeep();
            }
        })
    }

    /// Reads the capacity gauges of the account services' `context`, the rate `limiter` and the
    /// `usage` ledger, then renders the exposition.
    pub(crate) fn render(
        &self,
        context: &ServiceContext,
        limiter: &RateLimiter,
        usage: &UsageService,
    ) -> String {
        let m = &self.metrics;
        let (in_use, waiting, size) = context.db().load();
        m.gauge(metric::DB_POOL_CONNECTIONS_IN_USE, &[], in_use as f64);
        m.gauge(metric::DB_POOL_WAITING, &[], waiting as f64);
        m.gauge(metric::DB_POOL_SIZE, &[], size as f64);
        let (in_flight, threads) = context.password_queue();
        m.gauge(metric::ARGON2_IN_FLIGHT, &[], in_flight as f64);
        m.gauge(metric::ARGON2_QUEUE_LENGTH, &[], in_flight.saturating_sub(threads) as f64);
        let feed = context.credential_cache().health();
        m.gauge(metric::CHANGE_FEED_LAG_SECONDS, &[], feed.lag_ms as f64 / 1000.0);
        if let Some(up) = limiter.redis_available() {
            m.gauge(metric::REDIS_UP, &[], if up { 1.0 } else { 0.0 });
            m.counter(metric::RATE_LIMIT_MEMORY_FALLBACKS_TOTAL, &[])
                .absolute(limiter.memory_fallbacks());
        }
        if let Some(h) = usage.health() {
            m.gauge(metric::USAGE_QUEUE_LENGTH, &[], h.queued as f64);
            m.gauge(metric::USAGE_SPOOLED_RECORDS, &[], h.spooled as f64);
            m.counter(metric::USAGE_FLUSHES_TOTAL, &[]).absolute(h.flushes);
            m.counter(metric::USAGE_RECORDED_TOTAL, &[]).absolute(h.recorded);
            m.counter(metric::USAGE_RECORDS_DROPPED_TOTAL, &[]).absolute(h.records_dropped);
            m.counter(metric::USAGE_LOST_TOTAL, &[]).absolute(h.lost);
        }
        self.handle.render()
    }
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

    /// Every metric docs/operations.md lists is in the catalogue (so it has its help text).
    #[test]
    fn the_catalogue_has_every_metric_the_doc_lists() {
        let doc = include_str!("../../../docs/operations.md");
        for row in doc.lines().filter(|l| l.starts_with("| `aigw_")) {
            let name = row.split('`').nth(1).unwrap_or_default();
            assert!(
                CATALOGUE.iter().any(|(n, ..)| *n == name),
                "docs/operations.md lists {name}, which CATALOGUE lacks"
            );
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
