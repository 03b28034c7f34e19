//! One access-log line formatted: aigw's `JsonLines` against tracing-subscriber's stock JSON
//! format (`flatten_event`, current span, no span list, no target: the same fields), both
//! writing to a sink, outside any span and inside a request span.
//!
//! `cargo bench -p aigw-infra --bench log_format`

#![allow(missing_docs, clippy::unwrap_used)]

use aigw_infra::log_format::{span_fields, JsonLines};
use criterion::{criterion_group, criterion_main, Criterion};
use tracing_subscriber::layer::SubscriberExt;

fn access_line() {
    tracing::info!(
        method = "POST",
        route = "/api/v1/ai/chat/completions",
        path = "/api/v1/ai/chat/completions",
        status = 200u16,
        duration_ms = 0.61,
        bytes = 187u64,
        request_id = "019a0000-0000-7000-8000-000000000000",
        client_ip = "203.0.113.9",
        key_id = "019a0000-0000-7000-8000-000000000001",
        "access"
    );
}

fn formats(c: &mut Criterion) {
    let ours = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .event_format(JsonLines::default())
            .fmt_fields(span_fields())
            .with_writer(std::io::sink),
    );
    let stock = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_target(false)
            .with_writer(std::io::sink),
    );
    let mut group = c.benchmark_group("access_line");
    tracing::subscriber::with_default(ours, || {
        group.bench_function("JsonLines", |b| b.iter(access_line));
        let span = tracing::info_span!("request", request_id = "019a0000");
        let _entered = span.enter();
        group.bench_function("JsonLines_in_span", |b| b.iter(access_line));
    });
    tracing::subscriber::with_default(stock, || {
        group.bench_function("stock_json", |b| b.iter(access_line));
        let span = tracing::info_span!("request", request_id = "019a0000");
        let _entered = span.enter();
        group.bench_function("stock_json_in_span", |b| b.iter(access_line));
    });
    group.finish();
}

criterion_group!(benches, formats);
criterion_main!(benches);
