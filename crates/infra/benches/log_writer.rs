//! The logging thread's cost of one log line: aigw's `BatchWriter` against
//! `tracing-appender`'s `NonBlocking` (lossless, as aigw runs it), both writing to a sink.
//!
//! - `paced`: one 300-byte line every 200 µs (an access line per request at 5 000 req/s):
//!   the writer thread has gone to sleep between lines, as on a server that is not saturated,
//!   so a writer that is woken per line pays for the wake-up here.
//! - `burst`: lines back to back (the writer thread never sleeps).
//! - `threads/N`: N threads (1, 2, 4, and 8 and 16 where there are that many cores)
//!   writing lines back to back at once; the time is per line of each thread (N lines in
//!   all), so a writer whose threads do not contend keeps it flat as N grows, up to the number
//!   of cores. Against it: `OneLock`, this writer's previous design (one buffer under one
//!   mutex shared by every logging thread, kept in this file only to be measured), and
//!   `NonBlocking`.
//!
//! `cargo bench -p aigw-infra --bench log_writer`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use aigw_infra::log_writer::{BatchWriter, Limits};
use criterion::Throughput;
use criterion::{criterion_group, criterion_main, Criterion};
use std::io::Write;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn line() -> Vec<u8> {
    let mut line = br#"{"timestamp":"2026-11-22T04:10:00.123456Z","level":"INFO","message":"access","method":"POST","route":"/api/v1/ai/chat/completions","status":200,"duration_ms":0.61,"bytes":187,"request_id":"019a0000-0000-7000-8000-000000000000","client_ip":"203.0.113.9","key_id":"019a"#.to_vec();
    line.resize(299, b'x');
    line.push(b'\n');
    line
}

/// Times `threads` threads each writing `iters` lines back to back through a clone of
/// `writer`, from the moment they are all started until the last is done.
fn contended<W: Write + Clone + Send + 'static>(
    writer: &W,
    line: &Arc<Vec<u8>>,
    threads: usize,
    iters: u64,
) -> Duration {
    let start = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (mut writer, line, start) = (writer.clone(), line.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..iters {
                    writer.write_all(&line).unwrap();
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

    let line = Arc::new(line);
    let mut group = c.benchmark_group("threads");
    group.sample_size(20).measurement_time(Duration::from_secs(3));
    // The previous design's defaults: it woke its writer early at 1 MiB in all.
    let one_lock_limits = Limits { early_write: 1024 * 1024, ..Limits::default() };
    for threads in thread_counts() {
        group.throughput(Throughput::Elements(threads as u64));
        {
            let (batch, _guard) =
                BatchWriter::start(std::io::sink(), Limits::default(), "bench-log").unwrap();
            group.bench_function(format!("BatchWriter/{threads}"), |b| {
                b.iter_custom(|iters| contended(&batch, &line, threads, iters));
            });
        }
        {
            let (one_lock, _guard) =
                one_lock::OneLock::start(std::io::sink(), one_lock_limits, "bench-log").unwrap();
            group.bench_function(format!("OneLock/{threads}"), |b| {
                b.iter_custom(|iters| contended(&one_lock, &line, threads, iters));
            });
        }
        {
            let (non_blocking, _guard) =
                tracing_appender::non_blocking::NonBlockingBuilder::default()
                    .lossy(false)
                    .finish(std::io::sink());
            group.bench_function(format!("tracing_appender_NonBlocking/{threads}"), |b| {
                b.iter_custom(|iters| contended(&non_blocking, &line, threads, iters));
            });
        }
    }
    group.finish();
}

/// The previous design, kept here only to be measured against: every logging thread appends
/// to one buffer under one mutex shared with the others and with the writer thread.
mod one_lock {
    use aigw_infra::log_writer::Limits;
    use std::io::Write;
    use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
    use std::thread::JoinHandle;

    struct State {
        buffer: Vec<u8>,
        parked: bool,
        closed: bool,
    }

    struct Shared<W> {
        state: Mutex<State>,
        wake: Condvar,
        room: Condvar,
        output: Mutex<W>,
        limits: Limits,
    }

    impl<W> Shared<W> {
        fn lock(&self) -> MutexGuard<'_, State> {
            self.state.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }
    pub struct OneLock<W> {
        shared: Arc<Shared<W>>,
    }

    impl<W> Clone for OneLock<W> {
        fn clone(&self) -> Self {
            Self { shared: self.shared.clone() }
        }
    }
    pub struct OneLockGuard<W> {
        shared: Arc<Shared<W>>,
        thread: Option<JoinHandle<()>>,
    }

    impl<W: Write + Send + 'static> OneLock<W> {
        pub fn start(
            output: W,
            limits: Limits,
            thread_name: &str,
        ) -> std::io::Result<(Self, OneLockGuard<W>)> {
            let shared = Arc::new(Shared {
                state: Mutex::new(State { buffer: Vec::new(), parked: false, closed: false }),
                wake: Condvar::new(),
                room: Condvar::new(),
                output: Mutex::new(output),
                limits,
            });
            let worker = shared.clone();
            let thread = std::thread::Builder::new()
                .name(thread_name.to_owned())
                .spawn(move || run(&worker))?;
            Ok((Self { shared: shared.clone() }, OneLockGuard { shared, thread: Some(thread) }))
        }
    }
    fn run<W: Write>(shared: &Shared<W>) {
        let limits = shared.limits;
        let mut taken = Vec::new();
        let mut idle = 0u32;
        loop {
            let mut state = shared.lock();
            if !state.closed && state.buffer.len() < limits.early_write {
                state = shared
                    .wake
                    .wait_timeout(state, limits.interval)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            if state.buffer.is_empty() {
                if state.closed {
                    return;
                }
                idle += 1;
                if idle >= limits.idle_intervals {
                    state.parked = true;
                    while state.parked && !state.closed {
                        state = shared.wake.wait(state).unwrap_or_else(PoisonError::into_inner);
                    }
                    idle = 0;
                }
                continue;
            }
            idle = 0;
            std::mem::swap(&mut state.buffer, &mut taken);
            drop(state);
            shared.room.notify_all();
            let mut output = shared.output.lock().unwrap_or_else(PoisonError::into_inner);
            // A failing output (a closed pipe) cannot be reported anywhere: the lines are dropped.
            let _ = output.write_all(&taken).and_then(|()| output.flush());
            drop(output);
            taken.clear();
            // Keep the allocation for the next swap unless a burst made it large.
            if taken.capacity() > limits.early_write {
                taken = Vec::new();
            }
        }
    }

    impl<W: Write> Write for OneLock<W> {
        fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
            let shared = &self.shared;
            let mut state = shared.lock();
            while state.buffer.len() >= shared.limits.capacity && !state.closed {
                shared.wake.notify_one();
                state = shared.room.wait(state).unwrap_or_else(PoisonError::into_inner);
            }
            if state.closed {
                drop(state);
                let mut output = shared.output.lock().unwrap_or_else(PoisonError::into_inner);
                output.write_all(line)?;
                output.flush()?;
                return Ok(line.len());
            }
            let before = state.buffer.len();
            state.buffer.extend_from_slice(line);
            if state.parked {
                state.parked = false;
                shared.wake.notify_one();
            } else if before < shared.limits.early_write
                && state.buffer.len() >= shared.limits.early_write
            {
                shared.wake.notify_one();
            }
            Ok(line.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<W> Drop for OneLockGuard<W> {
        fn drop(&mut self) {
            self.shared.lock().closed = true;
            self.shared.wake.notify_all();
            self.shared.room.notify_all();
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

criterion_group!(benches, writers);
criterion_main!(benches);
