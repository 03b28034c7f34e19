//! The metrics aigw records per request, from several threads at once: what each request of
//! `GET /auth/me` records when its access line is written (a counter of requests by route,
//! method and status class, a histogram of durations by route, a counter of authentications
//! by credential and outcome), into the Prometheus recorder aigw's HTTP layer builds.
//!
//! Nothing here is aigw's own code: the benchmark measures whether those three series, shared
//! by every worker thread, make the threads contend (the time per request of each thread
//! growing with the number of threads, up to the number of cores).
//!
//! - `lookup/N`: as aigw records: per event, the series' key is built (its labels copied) and
//!   its handle looked up in the recorder's registry (a read lock on a shard of a hash map,
//!   and the handle's two reference counts), then the counter is incremented or the value
//!   recorded (an atomic add on the counter and on the series' generation; a histogram
//!   pushes the value and its time into a lock-free block list).
//! - `cached/N`: the handles looked up once, the same three events per request.
//!
//! A thread drains the histogram every 200 ms, as aigw's upkeep task does.
//!
//! `cargo bench -p aigw-infra --bench request_metrics`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use metrics::{Counter, Histogram, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const METADATA: Metadata<'static> = Metadata::new("aigw", Level::INFO, Some(module_path!()));

/// As aigw's service builds a key: the labels' values copied into the key.
fn key(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
    let labels: Vec<Label> = labels.iter().map(|(k, v)| Label::new(*k, (*v).to_owned())).collect();
    Key::from_parts(name, labels)
}

const REQUESTS: &str = "aigw_http_requests_total";
const DURATION: &str = "aigw_http_request_duration_seconds";
const AUTHENTICATIONS: &str = "aigw_authentications_total";

/// One request's metrics, each handle looked up by its key.
fn by_lookup(recorder: &PrometheusRecorder, seconds: f64) {
    let route = "/auth/me";
    recorder
        .register_counter(
            &key(REQUESTS, &[("route", route), ("method", "GET"), ("status_class", "2xx")]),
            &METADATA,
        )
        .increment(1);
    recorder.register_histogram(&key(DURATION, &[("route", route)]), &METADATA).record(seconds);
    recorder
        .register_counter(
            &key(AUTHENTICATIONS, &[("credential", "access_token"), ("outcome", "ok")]),
            &METADATA,
        )
        .increment(1);
}

/// The three handles of a request of `GET /auth/me`, looked up once.
#[derive(Clone)]
struct Handles(Counter, Histogram, Counter);

impl Handles {
    fn new(recorder: &PrometheusRecorder) -> Self {
        let route = "/auth/me";
        Self(
            recorder.register_counter(
                &key(REQUESTS, &[("route", route), ("method", "GET"), ("status_class", "2xx")]),
                &METADATA,
            ),
            recorder.register_histogram(&key(DURATION, &[("route", route)]), &METADATA),
            recorder.register_counter(
                &key(AUTHENTICATIONS, &[("credential", "access_token"), ("outcome", "ok")]),
                &METADATA,
            ),
        )
    }

    fn record(&self, seconds: f64) {
        self.0.increment(1);
        self.1.record(seconds);
        self.2.increment(1);
    }
}

/// Times `threads` threads each recording `iters` requests, from the moment they are all
/// started until the last is done.
fn contended(
    threads: usize,
    iters: u64,
    request: &(impl Fn(f64) + Clone + Send + 'static),
) -> Duration {
    let start = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (request, start) = (request.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for i in 0..iters {
                    request(0.000_25 + (i % 64) as f64 * 0.000_01);
                }
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    for handle in handles {
        handle.join().unwrap();
    }
    began.elapsed()
}

/// 1, 2, 4 threads, and 8 and 16 where there are that many cores.
fn thread_counts() -> Vec<usize> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    [1, 2, 4, 8, 16].into_iter().filter(|&n| n <= cores.max(4)).collect()
}

fn request_metrics(c: &mut Criterion) {
    let recorder = Arc::new(
        PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Suffix("_seconds".to_owned()),
                &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1],
            )
            .unwrap()
            .build_recorder(),
    );
    let handle = recorder.handle();
    let stop = Arc::new(AtomicBool::new(false));
    let upkeep = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                handle.run_upkeep();
            }
        })
    };
    let handles = Handles::new(&recorder);

    let mut group = c.benchmark_group("request_metrics");
    group.sample_size(20).measurement_time(Duration::from_secs(3));
    for threads in thread_counts() {
        group.throughput(Throughput::Elements(threads as u64));
        let by_key = {
            let recorder = recorder.clone();
            move |seconds| by_lookup(&recorder, seconds)
        };
        group.bench_function(format!("lookup/{threads}"), |b| {
            b.iter_custom(|iters| contended(threads, iters, &by_key));
        });
        let cached = {
            let handles = handles.clone();
            move |seconds| handles.record(seconds)
        };
        group.bench_function(format!("cached/{threads}"), |b| {
            b.iter_custom(|iters| contended(threads, iters, &cached));
        });
    }
    group.finish();
    stop.store(true, Ordering::Relaxed);
    upkeep.join().unwrap();
}

criterion_group!(benches, request_metrics);
criterion_main!(benches);
