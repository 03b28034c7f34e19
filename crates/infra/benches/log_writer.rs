//! The logging thread's cost of one log line: aigw's `BatchWriter` against
//! `tracing-appender`'s `NonBlocking` (lossless, as aigw runs it), both writing to a sink.
//!
//! - `paced`: one 300-byte line every 200 µs (an access line per request at 5 000 req/s):
//!   the writer thread has gone to sleep between lines, as on a server that is not saturated,
//!   so a writer that is woken per line pays for the wake-up here.
//! - `burst`: lines back to back (the writer thread never sleeps).
//!
//! `cargo bench -p aigw-infra --bench log_writer`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use aigw_infra::log_writer::{BatchWriter, Limits};
use criterion::{criterion_group, criterion_main, Criterion};
use std::io::Write;
use std::time::{Duration, Instant};

fn line() -> Vec<u8> {
    let mut line = br#"{"timestamp":"2026-11-22T04:10:00.123456Z","level":"INFO","message":"access","method":"POST","route":"/api/v1/ai/chat/completions","status":200,"duration_ms":0.61,"bytes":187,"request_id":"019a0000-0000-7000-8000-000000000000","client_ip":"203.0.113.9","key_id":"019a"#.to_vec();
    line.resize(299, b'x');
    line.push(b'\n');
    line
}

/// Times `writer.write_all(line)` alone, with `gap` of sleep before each line.
fn paced(writer: &mut impl Write, line: &[u8], iters: u64, gap: Duration) -> Duration {
    let mut spent = Duration::ZERO;
    for _ in 0..iters {
        std::thread::sleep(gap);
        let start = Instant::now();
        writer.write_all(line).unwrap();
        spent += start.elapsed();
    }
    spent
}

fn writers(c: &mut Criterion) {
    let line = line();
    let gap = Duration::from_micros(200);

    let mut group = c.benchmark_group("paced");
    group.sample_size(20).measurement_time(Duration::from_secs(4));
    {
        let (mut batch, _guard) =
            BatchWriter::start(std::io::sink(), Limits::default(), "bench-log").unwrap();
        group.bench_function("BatchWriter", |b| {
            b.iter_custom(|iters| paced(&mut batch, &line, iters, gap));
        });
    }
    {
        let (mut non_blocking, _guard) =
            tracing_appender::non_blocking::NonBlockingBuilder::default()
                .lossy(false)
                .finish(std::io::sink());
        group.bench_function("tracing_appender_NonBlocking", |b| {
            b.iter_custom(|iters| paced(&mut non_blocking, &line, iters, gap));
        });
    }
    group.finish();

    let mut group = c.benchmark_group("burst");
    {
        let (mut batch, _guard) =
            BatchWriter::start(std::io::sink(), Limits::default(), "bench-log").unwrap();
        group.bench_function("BatchWriter", |b| b.iter(|| batch.write_all(&line).unwrap()));
    }
    {
        let (mut non_blocking, _guard) =
            tracing_appender::non_blocking::NonBlockingBuilder::default()
                .lossy(false)
                .finish(std::io::sink());
        group.bench_function("tracing_appender_NonBlocking", |b| {
            b.iter(|| non_blocking.write_all(&line).unwrap());
        });
    }
    group.finish();
}

criterion_group!(benches, writers);
criterion_main!(benches);
