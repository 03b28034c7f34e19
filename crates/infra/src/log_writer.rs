//! The log sink: formatted lines are appended to buffers in memory by the threads that log,
//! and written to the output (stdout) by one thread of its own (`aigw-log`) every 10 ms.
//!
//! Why not `tracing-appender`'s non-blocking writer: its thread sleeps on a channel, so each
//! line logged while it sleeps wakes it. With one access line per request that is one
//! cross-thread wake-up per request: aigw built with it answered chat calls at a fixed
//! 1 000 req/s with a median 30-75 µs slower (the woken thread and the worker answering the
//! request contend for the CPU before the answer is sent; the crate's README.md has the
//! figures). Here the writer wakes on its own clock while lines come, and sleeps without a
//! timer once none has come for 100 ms; only the first line after such a pause wakes it.
//!
//! No lock shared by the threads that log: the buffer is split into shards, each a mutex
//! on its own cache line. A thread that logs is given one shard at its first line (round
//! robin over the threads that log, so up to that many threads each have a shard of their
//! own) and appends every line to it; the writer thread takes each shard's buffer in turn
//! and writes it. The only state the logging threads share is read, not written, per line
//! (whether the writer sleeps, whether the guard is gone). Order: the lines of one thread
//! keep their order; lines of different threads gathered in the same interval do not (each
//! line has its timestamp).
//!
//! Nothing is dropped: when a shard holds its share of [`Limits::capacity`] (the output is
//! that far behind, or the writer thread gets no CPU), the thread that logs writes that
//! shard and its line to the output itself, waiting for the output like the writer would.
//! Lines are whole: each `write` appends one formatted event under the shard's lock, and the
//! writer takes only whole buffers. Lines logged after the guard is dropped are written
//! directly by the thread that logs them.

use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

/// How the writer batches and how far it may fall behind. The byte limits are totals over
/// all shards; each shard gets an equal share of them (see [`BatchWriter::shards`]).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time between writes while lines come.
    pub interval: Duration,
    /// Bytes gathered (a shard holding its share of them) that wake the writer before its
    /// interval ends.
    pub early_write: usize,
    /// Bytes gathered (a shard holding its share of them) past which a logging thread writes
    /// its shard to the output itself (nothing is dropped).
    pub capacity: usize,
    /// Empty intervals after which the writer sleeps until the next line.
    pub idle_intervals: u32,
}

impl Default for Limits {
    /// 10 ms, 8 MiB, 16 MiB, 10 intervals (100 ms).
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(10),
            early_write: 8 * 1024 * 1024,
            capacity: 16 * 1024 * 1024,
            idle_intervals: 10,
        }
    }
}

/// The shard number the next thread to log is given (round robin, reduced modulo a writer's
/// shard count).
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard number, given at its first line: `usize::MAX` until then.
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's shard number (not yet reduced to a writer's shard count).
fn thread_shard() -> usize {
    SHARD
        .try_with(|shard| {
            let mut n = shard.get();
            if n == usize::MAX {
                n = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
                shard.set(n);
            }
            n
        })
        // A line logged while the thread's locals are torn down.
        .unwrap_or(0)
}

/// The number of shards: two per core the process may use, a power of two from 8 to 64.
fn shard_count() -> usize {
    let cores = std::thread::available_parallelism().map_or(4, std::num::NonZeroUsize::get);
    (cores * 2).next_power_of_two().clamp(8, 64)
}

struct Shared<W> {
    shards: Box<[CachePadded<Mutex<Vec<u8>>>]>,
    /// Bytes in one shard that wake the writer before its interval ends.
    early_write: usize,
    /// Bytes in one shard past which a thread that logs to it writes it to the output itself.
    capacity: usize,
    /// The writer sleeps until a line comes (no timer). Written by the writer when it goes to
    /// sleep and by the first line after: read-mostly, on its own cache line.
    parked: CachePadded<AtomicBool>,
    /// The guard was dropped: the writer writes what is left and stops.
    closed: CachePadded<AtomicBool>,
    /// The writer thread, to wake it.
    writer: OnceLock<Thread>,
    /// Held by whoever writes to the output, from taking a shard's buffer until it is written,
    /// so that the lines of one thread reach the output in order.
    output: Mutex<W>,
    limits: Limits,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<W: Write> Shared<W> {
    fn wake_writer(&self) {
        if let Some(thread) = self.writer.get() {
            thread.unpark();
        }
    }

    /// Takes every shard's lines and writes them; `spares` (one per shard) are swapped in.
    /// Returns whether there was anything to write.
    fn write_gathered(&self, spares: &mut [Vec<u8>]) -> bool {
        let mut output = lock(&self.output);
        let mut wrote = false;
        for (shard, spare) in self.shards.iter().zip(spares.iter_mut()) {
            {
                let mut buffer = lock(shard);
                if buffer.is_empty() {
                    continue;
                }
                std::mem::swap(&mut *buffer, spare);
            }
            // A failing output (a closed pipe) cannot be reported anywhere: the lines are
            // dropped.
            let _ = output.write_all(spare);
            spare.clear();
            // Keep the allocation for the next swap unless a burst made it large.
            if spare.capacity() > self.early_write {
                *spare = Vec::new();
            }
            wrote = true;
        }
        if wrote {
            let _ = output.flush();
        }
        wrote
    }

    /// Whether every shard is empty; frees the shards' allocations when it is.
    fn all_empty_then_free(&self, spares: &mut [Vec<u8>]) -> bool {
        for shard in self.shards.iter() {
            let mut buffer = lock(shard);
            if !buffer.is_empty() {
                return false;
            }
            *buffer = Vec::new();
        }
        spares.iter_mut().for_each(|spare| *spare = Vec::new());
        true
    }
}

/// A handle that logging threads write lines to; cheap to clone (a `MakeWriter` for
/// `tracing_subscriber::fmt`).
pub struct BatchWriter<W> {
    shared: Arc<Shared<W>>,
}

impl<W> Clone for BatchWriter<W> {
    fn clone(&self) -> Self {
        Self { shared: self.shared.clone() }
    }
}

impl<W> std::fmt::Debug for BatchWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchWriter")
            .field("limits", &self.shared.limits)
            .field("shards", &self.shared.shards.len())
            .finish()
    }
}

/// Stops the writer thread when dropped, after every line gathered has been written.
#[must_use = "dropping the guard stops the log writer"]
pub struct BatchWriterGuard<W: Write> {
    shared: Arc<Shared<W>>,
    thread: Option<JoinHandle<()>>,
}

impl<W: Write> std::fmt::Debug for BatchWriterGuard<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchWriterGuard").finish_non_exhaustive()
    }
}

impl<W: Write + Send + 'static> BatchWriter<W> {
    /// Starts the writer thread (named `thread_name`) writing to `output`, with
    /// [`shards`](Self::shards) buffers: two per core, from 8 to 64.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn start(
        output: W,
        limits: Limits,
        thread_name: &str,
    ) -> std::io::Result<(Self, BatchWriterGuard<W>)> {
        let shards = shard_count();
        let shared = Arc::new(Shared {
            shards: (0..shards).map(|_| CachePadded::new(Mutex::new(Vec::new()))).collect(),
            early_write: (limits.early_write / shards).max(1),
            capacity: (limits.capacity / shards).max(1),
            parked: CachePadded::new(AtomicBool::new(false)),
            closed: CachePadded::new(AtomicBool::new(false)),
            writer: OnceLock::new(),
            output: Mutex::new(output),
            limits,
        });
        let worker = shared.clone();
        let thread =
            std::thread::Builder::new().name(thread_name.to_owned()).spawn(move || run(&worker))?;
        let _ = shared.writer.set(thread.thread().clone());
        Ok((Self { shared: shared.clone() }, BatchWriterGuard { shared, thread: Some(thread) }))
    }
}

impl<W> BatchWriter<W> {
    /// The number of buffers the lines are spread over: threads that log share one only when
    /// there are more of them than this.
    #[must_use]
    pub fn shards(&self) -> usize {
        self.shared.shards.len()
    }
}

/// The writer thread: every interval, takes the shards' buffers and writes them.
fn run<W: Write>(shared: &Shared<W>) {
    let limits = shared.limits;
    let mut spares = vec![Vec::new(); shared.shards.len()];
    let mut idle = 0u32;
    loop {
        // Woken early by a shard at its early-write share, or by the guard's drop.
        std::thread::park_timeout(limits.interval);
        // Read before gathering: a thread that appends to a shard after it has been gathered
        // sees the close (through that shard's lock) and writes the shard itself.
        let closing = shared.closed.load(Ordering::Acquire);
        if shared.write_gathered(&mut spares) {
            idle = 0;
        } else {
            idle += 1;
        }
        if closing {
            return;
        }
        if idle >= limits.idle_intervals {
            // Set before looking at the shards: a line appended after a shard was looked at
            // sees it set (through that shard's lock) and wakes the writer.
            shared.parked.store(true, Ordering::SeqCst);
            if shared.all_empty_then_free(&mut spares) {
                while shared.parked.load(Ordering::Acquire)
                    && !shared.closed.load(Ordering::Acquire)
                {
                    std::thread::park();
                }
            }
            shared.parked.store(false, Ordering::Relaxed);
            idle = 0;
        }
    }
}

impl<W: Write> Write for BatchWriter<W> {
    /// Appends `line` whole to this thread's shard. When the shard holds its share of
    /// [`Limits::capacity`], or the guard has been dropped, writes the shard and `line` to the
    /// output itself (waiting for the output).
    ///
    /// # Errors
    /// Only from the output, when this thread writes to it itself.
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        let shared = &*self.shared;
        let shard = &shared.shards[thread_shard() % shared.shards.len()];
        let mut buffer = lock(shard);
        let closed = shared.closed.load(Ordering::Acquire);
        if closed || buffer.len() >= shared.capacity {
            // The output first, then the shard again (the writer's order of the two locks):
            // a shard's lines are taken only by whoever holds the output, and written before
            // it lets go of it, so each thread's lines reach the output in order.
            drop(buffer);
            let mut output = lock(&shared.output);
            let mut taken = std::mem::take(&mut *lock(shard));
            taken.extend_from_slice(line);
            output.write_all(&taken)?;
            output.flush()?;
            return Ok(line.len());
        }
        let before = buffer.len();
        buffer.extend_from_slice(line);
        let early = before < shared.early_write && buffer.len() >= shared.early_write;
        drop(buffer);
        // The first line after a pause wakes the sleeping writer (only one thread gets `true`
        // from the swap); a shard at its early-write share wakes it before its interval ends.
        let woken =
            shared.parked.load(Ordering::Relaxed) && shared.parked.swap(false, Ordering::AcqRel);
        if woken || early {
            shared.wake_writer();
        }
        Ok(line.len())
    }

    /// Lines are written by the writer thread; nothing to do here.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a, W: Write + 'static> tracing_subscriber::fmt::MakeWriter<'a> for BatchWriter<W> {
    type Writer = BatchWriter<W>;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl<W: Write> Drop for BatchWriterGuard<W> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
        // Had the writer thread panicked, what it left is written here.
        let mut spares = vec![Vec::new(); self.shared.shards.len()];
        self.shared.write_gathered(&mut spares);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// An output that keeps what it is given, shared with the test.
    #[derive(Clone, Default)]
    struct Kept(Arc<Mutex<Vec<u8>>>);

    impl Write for Kept {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines_of(kept: &Kept) -> Vec<String> {
        String::from_utf8(kept.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn line(t: usize, i: usize) -> String {
        format!("thread {t} line {i:05} {}\n", "x".repeat(40 + t))
    }

    /// `threads` threads log `lines` lines each.
    fn log_from_threads(writer: &BatchWriter<Kept>, threads: usize, lines: usize) {
        let threads: Vec<_> = (0..threads)
            .map(|t| {
                let mut writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..lines {
                        writer.write_all(line(t, i).as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    /// Every line of every thread arrives whole and once, each thread's in its order.
    fn assert_all_whole_in_order(kept: &Kept, threads: usize, lines: usize) {
        let all = lines_of(kept);
        assert_eq!(all.len(), threads * lines);
        for t in 0..threads {
            let prefix = format!("thread {t} line ");
            let mine: Vec<&String> = all.iter().filter(|l| l.starts_with(&prefix)).collect();
            assert_eq!(mine.len(), lines, "thread {t}");
            for (i, got) in mine.iter().enumerate() {
                assert_eq!(format!("{got}\n"), line(t, i), "thread {t}");
            }
        }
    }

    /// More threads than shards (so some share one) log 3 000 lines each through a few KiB
    /// of capacity (so they write their shards themselves again and again, while the writer
    /// writes too); every line arrives whole, once, in each thread's order.
    #[test]
    fn lines_are_whole_and_in_each_threads_order_from_many_threads() {
        let kept = Kept::default();
        let limits = Limits {
            interval: Duration::from_millis(2),
            early_write: 2048,
            capacity: 4096,
            idle_intervals: 2,
        };
        let (writer, guard) = BatchWriter::start(kept.clone(), limits, "test-log").unwrap();
        let threads = writer.shards() + 3;
        log_from_threads(&writer, threads, 3000);
        drop(guard);
        assert_all_whole_in_order(&kept, threads, 3000);
    }

    /// With a writer that would not write for a minute, every line gathered is written when
    /// the guard is dropped.
    #[test]
    fn nothing_is_lost_at_guard_drop() {
        let kept = Kept::default();
        let limits = Limits {
            interval: Duration::from_secs(60),
            early_write: usize::MAX,
            capacity: usize::MAX,
            idle_intervals: 10,
        };
        let (writer, guard) = BatchWriter::start(kept.clone(), limits, "test-log").unwrap();
        log_from_threads(&writer, 4, 2000);
        assert!(lines_of(&kept).is_empty(), "written before the interval ended");
        drop(guard);
        assert_all_whole_in_order(&kept, 4, 2000);
    }

    /// With a writer that would not write for a minute, a thread whose shard is full writes it
    /// to the output itself, in order, and nothing is dropped.
    #[test]
    fn a_full_shard_is_written_by_its_thread() {
        let kept = Kept::default();
        let limits = Limits {
            interval: Duration::from_secs(60),
            early_write: usize::MAX,
            capacity: 1,
            idle_intervals: 10,
        };
        let (writer, guard) = BatchWriter::start(kept.clone(), limits, "test-log").unwrap();
        let mut one = writer.clone();
        for i in 0..101 {
            one.write_all(line(0, i).as_bytes()).unwrap();
        }
        // Every other line finds its shard full (one line is over a share of 1 byte) and
        // writes it with itself: the 101st is left in the shard.
        assert_eq!(lines_of(&kept).len(), 100);
        drop(guard);
        assert_all_whole_in_order(&kept, 1, 101);
    }

    /// Waits up to 5 s for `done`, panicking with `what`.
    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            // Real time: the writer's thread runs on its own clock (its flush interval and
            // the idle intervals after which it sleeps), which the test cannot move.
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A line logged after a pause (the writer asleep without a timer) is written within a few
    /// intervals; a line logged after the guard is gone is written at once.
    #[test]
    fn a_sleeping_writer_wakes_for_the_next_line() {
        let kept = Kept::default();
        let limits =
            Limits { interval: Duration::from_millis(5), idle_intervals: 2, ..Limits::default() };
        let (mut writer, guard) = BatchWriter::start(kept.clone(), limits, "test-log").unwrap();
        writer.write_all(b"first\n").unwrap();
        wait_until("the writer did not go to sleep", || guard.shared.parked.load(Ordering::SeqCst));
        assert_eq!(lines_of(&kept), ["first"]);
        writer.write_all(b"second\n").unwrap();
        wait_until("the second line was not written", || lines_of(&kept).len() == 2);
        drop(guard);
        writer.write_all(b"after\n").unwrap();
        assert_eq!(lines_of(&kept), ["first", "second", "after"]);
    }
}
