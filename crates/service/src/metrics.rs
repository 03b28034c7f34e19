//! Where the service's counters and histograms go: a handle to one `metrics` recorder.
//!
//! Each server owns its recorder (the HTTP layer builds a Prometheus one and renders it at
//! `GET /metrics`), so several servers in one process (tests, embedders) never mix their
//! numbers, which the process-wide recorder of the `metrics` facade would. Without a recorder
//! ([`Metrics::default`]) every call does nothing.
//!
//! Label values must come from a small fixed set: a policy or outcome name, a configured
//! provider or model, a status class. Never a user id, key id, e-mail or anything a caller
//! chooses (docs/operations.md lists every metric and its labels).
//!
//! Counters and histograms are registered once per thread and label set: each thread keeps
//! the handles it has used ([`HANDLES`]), so a request's events cost a hash of their labels
//! and a lookup instead of building a `metrics::Key` (an allocation per label) and a lookup in
//! the recorder's shared registry (docs/performance.md).

use ::metrics::{Counter, Histogram, Key, Label, Level, Metadata, Recorder};
use std::cell::RefCell;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A cheap-to-clone handle to the server's metrics recorder.
#[derive(Clone, Default)]
pub struct Metrics {
    recorder: Option<Arc<dyn Recorder + Send + Sync>>,
    /// This recorder's number in [`HANDLES`] (0 without a recorder).
    id: u64,
}

/// Handles registered by this thread: by a hash of (recorder, name, labels), each with what
/// it was registered for (hashes may collide).
struct Registered {
    recorder: u64,
    name: &'static str,
    labels: Vec<(&'static str, Box<str>)>,
    handle: Handle,
}

#[derive(Clone)]
enum Handle {
    Counter(Counter),
    Histogram(Histogram),
}

/// Most handles a thread keeps; past it the cache starts over (label sets are bounded, so
/// only many servers in one process, as in tests, get there).
const MAX_HANDLES_PER_THREAD: usize = 4096;

thread_local! {
    // Keyed by an Fx hash already: the map itself hashes it with Fx too (one multiplication)
    // instead of SipHash, about 1 000 instructions per chat call (callgrind).
    static HANDLES: RefCell<rustc_hash::FxHashMap<u64, Vec<Registered>>> =
        RefCell::new(rustc_hash::FxHashMap::default());
}

/// Numbers the recorders of this process, for [`HANDLES`].
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

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
        Self { recorder: Some(recorder), id: NEXT_ID.fetch_add(1, Ordering::Relaxed) }
    }

    /// The handle of `name` with `labels` that this thread registered before, or `register`'s.
    fn cached(
        &self,
        name: &'static str,
        labels: &[(&'static str, &str)],
        register: impl FnOnce(&Key) -> Handle,
    ) -> Handle {
        let mut hasher = rustc_hash::FxHasher::default();
        (self.id, name).hash(&mut hasher);
        for (k, v) in labels {
            (k, v).hash(&mut hasher);
        }
        let hash = hasher.finish();
        let same = |r: &Registered| {
            r.recorder == self.id
                && r.name == name
                && r.labels.len() == labels.len()
                && r.labels.iter().zip(labels).all(|((k1, v1), (k2, v2))| k1 == k2 && **v1 == **v2)
        };
        HANDLES.with(|handles| {
            let mut handles = handles.borrow_mut();
            if let Some(found) = handles.get(&hash).and_then(|list| list.iter().find(|r| same(r))) {
                return found.handle.clone();
            }
            if handles.len() >= MAX_HANDLES_PER_THREAD {
                handles.clear();
            }
            let handle = register(&key(name, labels));
            handles.entry(hash).or_default().push(Registered {
                recorder: self.id,
                name,
                labels: labels.iter().map(|(k, v)| (*k, Box::from(*v))).collect(),
                handle: handle.clone(),
            });
            handle
        })
    }

    /// The counter `name` with `labels` (a no-op counter without a recorder).
    pub fn counter(&self, name: &'static str, labels: &[(&'static str, &str)]) -> Counter {
        let Some(r) = &self.recorder else {
            return Counter::noop();
        };
        let handle =
            self.cached(name, labels, |key| Handle::Counter(r.register_counter(key, &METADATA)));
        match handle {
            Handle::Counter(counter) => counter,
            Handle::Histogram(_) => r.register_counter(&key(name, labels), &METADATA),
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
        let Some(r) = &self.recorder else {
            return Histogram::noop();
        };
        let handle = self
            .cached(name, labels, |key| Handle::Histogram(r.register_histogram(key, &METADATA)));
        match handle {
            Handle::Histogram(histogram) => histogram,
            Handle::Counter(_) => r.register_histogram(&key(name, labels), &METADATA),
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
    fn handles_are_cached_per_recorder_and_label_set() {
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
