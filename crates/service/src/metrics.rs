//! Where the service's counters and histograms go: a handle to one `metrics` recorder.
//!
//! Each server owns its recorder (the HTTP layer builds a Prometheus one and renders it at
//! `GET /metrics`), so several servers in one process (tests, embedders) never mix their
//! numbers, which the process-wide recorder of the `metrics` facade would. Without a recorder
//! ([`Metrics::default`]) every call does nothing.
//!
//! Label values must come from a small fixed set: a policy or outcome name, a configured
//! provider or model, a status class. Never a user id, key id, e-mail or anything a caller
//! chooses (docs/operations.md lists every metric and its labels). The one exception is the
//! team id of [`name::TEAM_BUDGET_USED_RATIO`], a UUID aigw draws, on at most
//! `alerts.team_gauges` teams per node.
//!
//! Each event builds its `metrics::Key` and looks its handle up in the recorder's own registry
//! (a hash map sharded under read-write locks, in `metrics-util`): about 0.2 µs per event, a
//! few per request.

use ::metrics::{Counter, Histogram, Key, Label, Level, Metadata, Recorder};

/// The names of the metrics this crate records, one constant each (the name without `aigw_`,
/// in capitals). The HTTP layer's catalogue gives each its kind, labels and help text
/// (docs/operations.md lists them); a use case names a metric only through these.
pub mod name {
    /// Counter `{outcome}`: refresh-token exchanges.
    pub const REFRESH_TOTAL: &str = "aigw_refresh_total";
    /// Counter: API keys created.
    pub const API_KEYS_CREATED_TOTAL: &str = "aigw_api_keys_created_total";
    /// Counter `{how}`: API keys revoked or deleted.
    pub const API_KEYS_REVOKED_TOTAL: &str = "aigw_api_keys_revoked_total";
    /// Counter `{scope, reason}`: gateway calls refused by a limit of the key or its team.
    pub const LIMIT_REFUSALS_TOTAL: &str = "aigw_limit_refusals_total";
    /// Counter `{provider, model, status_class}`: calls to upstream providers.
    pub const UPSTREAM_REQUESTS_TOTAL: &str = "aigw_upstream_requests_total";
    /// Counter `{deployment, outcome}`: attempts at deployments (`ok`, `failed`: retried or
    /// not, `refused`: a 4xx the caller gets).
    pub const UPSTREAM_ATTEMPTS_TOTAL: &str = "aigw_upstream_attempts_total";
    /// Gauge `{deployment}`: its breaker (0 closed, 1 open, 2 half open).
    pub const BREAKER_STATE: &str = "aigw_breaker_state";
    /// Counter `{model, fallback}`: fallbacks taken.
    pub const FALLBACKS_TOTAL: &str = "aigw_fallbacks_total";
    /// Histogram `{provider, model}`, seconds: upstream latency to the answer's last byte.
    pub const UPSTREAM_DURATION_SECONDS: &str = "aigw_upstream_duration_seconds";
    /// Histogram `{provider, model}`, seconds: upstream time to the answer's head.
    pub const UPSTREAM_TTFB_SECONDS: &str = "aigw_upstream_ttfb_seconds";
    /// Histogram `{provider}`, seconds: a chat call's time in aigw before the upstream call.
    pub const GATEWAY_OVERHEAD_SECONDS: &str = "aigw_gateway_overhead_seconds";
    /// Counter `{provider, model, kind}`: tokens metered.
    pub const TOKENS_TOTAL: &str = "aigw_tokens_total";
    /// Counter `{provider, model}`, micro-USD: cost metered.
    pub const COST_USD_MICROS_TOTAL: &str = "aigw_cost_usd_micros_total";
    /// Counter `{kind, outcome}`: account messages sent, retried, failed or dropped.
    pub const EMAILS_TOTAL: &str = "aigw_emails_total";
    /// Counter `{scope, threshold}`: budget alerts this node claimed and sent.
    pub const BUDGET_ALERTS_TOTAL: &str = "aigw_budget_alerts_total";
    /// Gauge `{team_id}`: a team's spend in its budget period over its budget (1.0: all of it),
    /// for at most `alerts.team_gauges` teams per node.
    pub const TEAM_BUDGET_USED_RATIO: &str = "aigw_team_budget_used_ratio";
    /// Counter `{outcome}`: webhook delivery attempts (`delivered`, `retried`, `failed`).
    pub const WEBHOOK_DELIVERIES_TOTAL: &str = "aigw_webhook_deliveries_total";
}
use std::sync::Arc;

/// A cheap-to-clone handle to the server's metrics recorder.
#[derive(Clone, Default)]
pub struct Metrics {
    recorder: Option<Arc<dyn Recorder + Send + Sync>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").field("enabled", &self.recorder.is_some()).finish()
    }
}

const METADATA: Metadata<'static> = Metadata::new("aigw", Level::INFO, Some(module_path!()));

fn key(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
    let labels: Vec<Label> = labels.iter().map(|(k, v)| Label::new(*k, (*v).to_owned())).collect();
    Key::from_parts(name, labels)
}

impl Metrics {
    /// Records into `recorder`.
    pub fn new(recorder: Arc<dyn Recorder + Send + Sync>) -> Self {
        Self { recorder: Some(recorder) }
    }

    /// The counter `name` with `labels` (a no-op counter without a recorder).
    pub fn counter(&self, name: &'static str, labels: &[(&'static str, &str)]) -> Counter {
        match &self.recorder {
            Some(r) => r.register_counter(&key(name, labels), &METADATA),
            None => Counter::noop(),
        }
    }

    /// Adds 1 to the counter `name` with `labels`.
    pub fn count(&self, name: &'static str, labels: &[(&'static str, &str)]) {
        if self.recorder.is_some() {
            self.counter(name, labels).increment(1);
        }
    }

    /// The histogram `name` with `labels` (values in seconds for `*_seconds`).
    pub fn histogram(&self, name: &'static str, labels: &[(&'static str, &str)]) -> Histogram {
        match &self.recorder {
            Some(r) => r.register_histogram(&key(name, labels), &METADATA),
            None => Histogram::noop(),
        }
    }

    /// Sets the gauge `name` with `labels` to `value`.
    pub fn gauge(&self, name: &'static str, labels: &[(&'static str, &str)], value: f64) {
        if let Some(r) = &self.recorder {
            r.register_gauge(&key(name, labels), &METADATA).set(value);
        }
    }
}

/// `"2xx"` … `"5xx"` for an HTTP status (`"other"` outside 100–599): a bounded label.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes_are_bounded() {
        assert_eq!(status_class(200), "2xx");
        assert_eq!(status_class(429), "4xx");
        assert_eq!(status_class(503), "5xx");
        assert_eq!(status_class(0), "other");
        assert_eq!(status_class(999), "other");
    }

    #[test]
    fn each_recorder_counts_its_own_events_by_label_set() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let (first, second) = (DebuggingRecorder::new(), DebuggingRecorder::new());
        let (snap1, snap2) = (first.snapshotter(), second.snapshotter());
        let (m1, m2) = (Metrics::new(Arc::new(first)), Metrics::new(Arc::new(second)));
        for _ in 0..3 {
            m1.count("aigw_test_total", &[("outcome", "ok")]);
        }
        m1.count("aigw_test_total", &[("outcome", "no")]);
        m2.count("aigw_test_total", &[("outcome", "ok")]);
        m1.histogram("aigw_test_seconds", &[("route", "/a")]).record(0.5);
        m1.histogram("aigw_test_seconds", &[("route", "/a")]).record(1.5);
        let values = |snap: &metrics_util::debugging::Snapshotter| {
            let mut values: Vec<(String, DebugValue)> = snap
                .snapshot()
                .into_vec()
                .into_iter()
                .map(|(key, _, _, value)| {
                    let key = key.key();
                    let labels: Vec<String> =
                        key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
                    (format!("{}{{{}}}", key.name(), labels.join(",")), value)
                })
                .collect();
            values.sort_by(|a, b| a.0.cmp(&b.0));
            values
        };
        let one = values(&snap1);
        assert_eq!(one.len(), 3, "{one:?}");
        assert_eq!(one[0].0, "aigw_test_seconds{route=/a}");
        assert!(matches!(&one[0].1, DebugValue::Histogram(v) if v.len() == 2), "{one:?}");
        assert_eq!(one[1], ("aigw_test_total{outcome=no}".to_owned(), DebugValue::Counter(1)));
        assert_eq!(one[2], ("aigw_test_total{outcome=ok}".to_owned(), DebugValue::Counter(3)));
        let two = values(&snap2);
        assert_eq!(two, vec![("aigw_test_total{outcome=ok}".to_owned(), DebugValue::Counter(1))]);
    }

    #[test]
    fn without_a_recorder_nothing_happens() {
        let m = Metrics::default();
        m.count("aigw_test_total", &[("outcome", "ok")]);
        m.histogram("aigw_test_seconds", &[]).record(1.0);
        m.gauge("aigw_test", &[], 1.0);
    }
}
