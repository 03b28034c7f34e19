//! The recorder: a supervised background task that turns metered calls into usage records
//! and writes them to the database in batches, off the request path.
//!
//! ```text
//! request path --try_send--> channel (queue_capacity) --> recorder task --batch--> database
//!      |  full or closed                                     |  database failing, queue full
//!      +--------------> spool file (fsync) <-----------------+ -- replayed on recovery/start
//! ```
//!
//! - The request path never waits: it moves a [`Pending`] into a bounded channel. Only when
//!   the channel is full (or closed after shutdown) does it finalize the record itself and
//!   append it to the spool.
//! - The task finalizes each record (usage, estimate, cost) into an in-memory queue, and
//!   writes the queue every `flush_interval_ms` (sooner once `batch_size` records wait),
//!   `batch_size` records per transaction, idempotent by request id.
//! - A failed write sends its batch to the spool. While the database fails, the queue goes
//!   to the spool at every tick (records never wait in memory longer than one interval), and
//!   the replay of the spool is what probes the database; once it succeeds, direct writes
//!   resume and the spool drains in the background. At start the spool is replayed too.
//! - So a crash (`kill -9`, power cut) loses at most what was accepted since the last tick,
//!   plus a batch whose database write was in flight (normally milliseconds; at most the
//!   pool's acquire timeout while the database hangs). docs/usage.md states this bound.
//! - [`Recorder::shutdown`] (after SIGTERM, once the HTTP server has stopped) drains the
//!   channel, writes what it can within [`SHUTDOWN_DEADLINE`], and spools the rest.
//! - The task runs under a supervisor that restarts it if it panics; its state (queue,
//!   replay position, channel) lives outside the task and survives the restart.

use super::meter::{Meter, Pending};
use super::prices::PriceTable;
use super::spool::Spool;
use super::supervisor::supervise;
use crate::db::Db;
use crate::error::ServiceError;
use aigw_domain::usage::UsageRecord;
use chrono::{DateTime, Utc};
use metrics::Counter;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// After taking in what waits in the channel, the task lets new records gather this long
/// before it looks again: one wake-up per 10 ms instead of one per call (waking another thread
/// for every call cost about a third of the chat rate, docs/performance.md). Settlements of
/// budgets and token limits happen when a record is taken in, so they lag the answer by at
/// most this much more.
pub const ACCEPT_LINGER: Duration = Duration::from_millis(10);

/// How long [`Recorder::shutdown`] keeps trying the database before it spools the rest.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// Settings of a [`Recorder`].
#[derive(Debug, Clone)]
pub struct RecorderOptions {
    /// Most time between two writes.
    pub flush_interval: Duration,
    /// Most records per transaction.
    pub batch_size: usize,
    /// Capacity of the channel, and most records queued in memory before spooling.
    pub queue_capacity: usize,
    /// Folder of the spool file.
    pub spool_dir: PathBuf,
    /// Where tokens and cost by model are counted (`aigw_tokens_total`,
    /// `aigw_cost_usd_micros_total`).
    pub metrics: crate::metrics::Metrics,
}

/// A snapshot of the recorder's health, for `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderHealth {
    /// Records accepted and not yet written or spooled (channel plus queue).
    pub queued: usize,
    /// Records waiting in the spool file.
    pub spooled: u64,
    /// Bytes of the spool file.
    pub spool_bytes: u64,
    /// When a write to the database last succeeded, UTC.
    pub last_flush_at: Option<DateTime<Utc>>,
    /// Whether the last write to the database succeeded (true before the first).
    pub database_ok: bool,
    /// Records written to the ledger since start (replays of records already there excluded).
    pub recorded: u64,
    /// Times the task was restarted after a panic.
    pub restarts: u64,
    /// Records that could be neither written nor spooled (the spool failed too).
    pub lost: u64,
}

/// What the request path, the task and the health probe share.
#[derive(Debug)]
struct Shared {
    prices: PriceTable,
    spool: Spool,
    queued: AtomicUsize,
    database_ok: AtomicBool,
    last_flush_at: Mutex<Option<DateTime<Utc>>>,
    recorded: AtomicU64,
    restarts: Arc<AtomicU64>,
    lost: AtomicU64,
}

impl Shared {
    /// Appends `records` to the spool; counts them as lost if even that fails.
    fn spool(&self, records: &[UsageRecord]) {
        if let Err(e) = self.spool.append(records) {
            self.lost.fetch_add(records.len() as u64, Ordering::Relaxed);
            tracing::error!(error = %e, records = records.len(), "usage records could not be spooled; they are lost");
        }
    }

    fn flushed(&self) {
        self.database_ok.store(true, Ordering::Relaxed);
        *self.last_flush_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(aigw_domain::time::now());
    }

    fn failed(&self, e: &ServiceError) {
        if self.database_ok.swap(false, Ordering::Relaxed) {
            tracing::warn!(error = %e, "writing usage records failed; spooling them until the database answers");
        }
    }
}

/// The request path's end of the recorder: cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct RecorderHandle {
    tx: mpsc::Sender<Pending>,
    shared: Arc<Shared>,
}

impl RecorderHandle {
    /// The prices records are priced with.
    pub(crate) fn prices(&self) -> &PriceTable {
        &self.shared.prices
    }

    /// Hands a metered call to the recorder without waiting. When the channel is full or
    /// closed, the record is finalized here and spooled (blocking file I/O; the last resort).
    pub(crate) fn submit(&self, pending: Pending) {
        match self.tx.try_send(pending) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(p) | mpsc::error::TrySendError::Closed(p)) => {
                let record = p.into_record(&self.shared.prices);
                self.shared.spool(std::slice::from_ref(&record));
            }
        }
    }
}

/// The usage recorder (see the module docs).
#[derive(Debug)]
pub struct Recorder {
    handle: RecorderHandle,
    stop: watch::Sender<bool>,
    supervisor: Mutex<Option<JoinHandle<()>>>,
}

/// The task's state; outlives a panicking run so that a restart loses nothing.
#[derive(Debug)]
struct State {
    rx: mpsc::Receiver<Pending>,
    queue: VecDeque<UsageRecord>,
    job: Option<Job>,
    /// The spool file being replayed and the offset of its next batch.
    replay: Option<(PathBuf, u64)>,
    /// `aigw_tokens_total` (prompt, completion) and `aigw_cost_usd_micros_total` by provider
    /// and model, registered once (configured models only: a bounded set).
    counters: HashMap<String, HashMap<String, [Counter; 3]>>,
}

#[derive(Debug)]
struct Job {
    started: Instant,
    /// The records of a write job, kept to spool them if it cannot finish at shutdown.
    batch: Option<Arc<Vec<UsageRecord>>>,
    handle: JoinHandle<JobResult>,
}

#[derive(Debug)]
enum JobResult {
    Written(Arc<Vec<UsageRecord>>, Result<usize, ServiceError>),
    Replayed(PathBuf, u64, Result<ReplayProgress, ServiceError>),
}

#[derive(Debug)]
struct ReplayProgress {
    next_offset: u64,
    at_end: bool,
    records: usize,
    inserted: usize,
}

/// The task's fixed context.
#[derive(Debug)]
struct Context {
    db: Db,
    shared: Arc<Shared>,
    options: RecorderOptions,
}

impl Recorder {
    /// Opens the spool and starts the supervised task (on the current tokio runtime). A spool
    /// left by an earlier process is replayed as soon as the database answers.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when the spool folder or file cannot be opened.
    pub fn start(
        db: Db,
        prices: PriceTable,
        options: RecorderOptions,
    ) -> Result<Self, ServiceError> {
        let spool = Spool::open(&options.spool_dir).map_err(|e| {
            ServiceError::Internal(format!(
                "opening the usage spool in {}: {e}",
                options.spool_dir.display()
            ))
        })?;
        if spool.records() > 0 {
            tracing::info!(records = spool.records(), "usage spool found; replaying it");
        }
        let capacity = options.queue_capacity.max(1);
        let (tx, rx) = mpsc::channel(capacity);
        let shared = Arc::new(Shared {
            prices,
            spool,
            queued: AtomicUsize::new(0),
            database_ok: AtomicBool::new(true),
            last_flush_at: Mutex::new(None),
            recorded: AtomicU64::new(0),
            restarts: Arc::new(AtomicU64::new(0)),
            lost: AtomicU64::new(0),
        });
        let state = Arc::new(tokio::sync::Mutex::new(State {
            rx,
            queue: VecDeque::new(),
            counters: HashMap::new(),
            job: None,
            replay: None,
        }));
        let (stop, stopped) = watch::channel(false);
        let context = Arc::new(Context { db, shared: shared.clone(), options });
        let supervisor = supervise("usage recorder", shared.restarts.clone(), move || {
            let (context, state, stopped) = (context.clone(), state.clone(), stopped.clone());
            async move {
                let mut state = state.lock().await;
                context.run(&mut state, stopped).await;
            }
        });
        Ok(Self {
            handle: RecorderHandle { tx, shared },
            stop,
            supervisor: Mutex::new(Some(supervisor)),
        })
    }

    /// A meter feeding this recorder (for the gateway).
    pub fn meter(&self) -> Meter {
        Meter::new(self.handle.clone())
    }

    /// The current health.
    pub fn health(&self) -> RecorderHealth {
        let shared = &self.handle.shared;
        let in_channel = self.handle.tx.max_capacity() - self.handle.tx.capacity();
        RecorderHealth {
            queued: shared.queued.load(Ordering::Relaxed) + in_channel,
            spooled: shared.spool.records(),
            spool_bytes: shared.spool.bytes(),
            last_flush_at: *shared
                .last_flush_at
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            database_ok: shared.database_ok.load(Ordering::Relaxed),
            recorded: shared.recorded.load(Ordering::Relaxed),
            restarts: shared.restarts.load(Ordering::Relaxed),
            lost: shared.lost.load(Ordering::Relaxed),
        }
    }

    /// Stops the task after writing every accepted record to the database (within
    /// [`SHUTDOWN_DEADLINE`]) or else to the spool. Records submitted afterwards go straight
    /// to the spool. Idempotent.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let supervisor =
            self.supervisor.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(handle) = supervisor {
            let _ = handle.await;
        }
    }
}

impl Context {
    async fn run(&self, state: &mut State, mut stopped: watch::Receiver<bool>) {
        let interval = self.options.flush_interval.max(Duration::from_millis(10));
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // While set, the channel is not looked at before then (see [`ACCEPT_LINGER`]).
        let mut lingering: Option<tokio::time::Instant> = None;
        loop {
            if *stopped.borrow() {
                self.drain_and_stop(state).await;
                return;
            }
            let job = async {
                match state.job.as_mut() {
                    Some(job) => (&mut job.handle).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                changed = stopped.changed() => {
                    // The recorder itself is gone (never shut down): stop as if asked to.
                    if changed.is_err() {
                        self.drain_and_stop(state).await;
                        return;
                    }
                }
                done = job => {
                    state.job = None;
                    match done {
                        Ok(result) => self.on_job(state, result),
                        Err(e) => tracing::error!(error = %e, "a usage write task failed"),
                    }
                    // After a failure, the next attempt waits for the tick.
                    self.start_job(state, false);
                }
                _ = tokio::time::sleep_until(lingering.unwrap_or_else(tokio::time::Instant::now)),
                    if lingering.is_some() => lingering = None,
                pending = state.rx.recv(), if lingering.is_none() => match pending {
                    Some(pending) => {
                        self.accept(state, pending);
                        while state.queue.len() < self.options.batch_size {
                            let Ok(pending) = state.rx.try_recv() else { break };
                            self.accept(state, pending);
                        }
                        self.start_job(state, false);
                        lingering = Some(tokio::time::Instant::now() + ACCEPT_LINGER);
                    }
                    // Every handle is gone: nothing more can come.
                    None => {
                        self.drain_and_stop(state).await;
                        return;
                    }
                },
                _ = tick.tick() => self.on_tick(state, interval),
            }
        }
    }

    /// Finalizes a metered call into the queue; spools the queue when it is full.
    fn accept(&self, state: &mut State, pending: Pending) {
        let record = pending.into_record(&self.shared.prices);
        let cached = state.counters.get(&record.provider).and_then(|m| m.get(&record.model));
        let counters = match cached {
            Some(counters) => counters,
            None => {
                if state.counters.values().map(HashMap::len).sum::<usize>() >= 1024 {
                    state.counters.clear();
                }
                let metrics = &self.options.metrics;
                let labels =
                    [("provider", record.provider.as_str()), ("model", record.model.as_str())];
                let [provider, model] = labels;
                let tokens =
                    |kind| metrics.counter("aigw_tokens_total", &[provider, model, ("kind", kind)]);
                let registered = [
                    tokens("prompt"),
                    tokens("completion"),
                    metrics.counter("aigw_cost_usd_micros_total", &labels),
                ];
                state
                    .counters
                    .entry(record.provider.clone())
                    .or_default()
                    .entry(record.model.clone())
                    .or_insert(registered)
            }
        };
        let [prompt, completion, cost] = counters;
        prompt.increment(record.tokens.prompt_tokens);
        completion.increment(record.tokens.completion_tokens);
        cost.increment(record.cost_micros);
        state.queue.push_back(record);
        if state.queue.len() >= self.options.queue_capacity.max(1) {
            self.spool_queue(state);
        }
        self.shared.queued.store(state.queue.len(), Ordering::Relaxed);
    }

    fn spool_queue(&self, state: &mut State) {
        if state.queue.is_empty() {
            return;
        }
        let records: Vec<UsageRecord> = state.queue.drain(..).collect();
        self.shared.spool(&records);
        self.shared.queued.store(0, Ordering::Relaxed);
    }

    fn on_tick(&self, state: &mut State, interval: Duration) {
        match &state.job {
            Some(job) if job.started.elapsed() >= interval => {
                // The database is slow: records must not wait in memory beyond an interval.
                self.spool_queue(state);
            }
            Some(_) => {}
            None if !self.shared.database_ok.load(Ordering::Relaxed) => {
                self.spool_queue(state);
                self.start_job(state, true);
            }
            None => self.start_job(state, true),
        }
    }

    /// Starts the next write (the queue first, then the spool's replay) unless one runs.
    /// Between ticks only a full batch is written, so a light load is not split into one
    /// transaction per record.
    fn start_job(&self, state: &mut State, tick: bool) {
        if state.job.is_some() {
            return;
        }
        let healthy = self.shared.database_ok.load(Ordering::Relaxed);
        if !healthy && !tick {
            return;
        }
        let batch_size = self.options.batch_size.max(1);
        if healthy && (state.queue.len() >= batch_size || (tick && !state.queue.is_empty())) {
            let n = state.queue.len().min(batch_size);
            let batch: Arc<Vec<UsageRecord>> = Arc::new(state.queue.drain(..n).collect());
            self.shared.queued.store(state.queue.len(), Ordering::Relaxed);
            let (db, records) = (self.db.clone(), batch.clone());
            let handle = tokio::spawn(async move {
                let written = records.clone();
                let result = db
                    .run(move |conn| Ok(aigw_persistence::usage::insert_batch(conn, &written)?))
                    .await;
                JobResult::Written(records, result)
            });
            state.job = Some(Job { started: Instant::now(), batch: Some(batch), handle });
            return;
        }
        if state.replay.is_none() && self.shared.spool.records() > 0 {
            match self.shared.spool.take_for_replay() {
                Ok(Some(path)) => state.replay = Some((path, 0)),
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "cannot replay the usage spool"),
            }
        }
        if let Some((path, offset)) = state.replay.clone() {
            let db = self.db.clone();
            let handle = tokio::spawn(async move {
                let result = replay_batch(&db, path.clone(), offset, batch_size).await;
                JobResult::Replayed(path, offset, result)
            });
            state.job = Some(Job { started: Instant::now(), batch: None, handle });
        }
    }

    fn on_job(&self, state: &mut State, result: JobResult) {
        match result {
            JobResult::Written(_, Ok(inserted)) => {
                self.shared.recorded.fetch_add(inserted as u64, Ordering::Relaxed);
                self.shared.flushed();
            }
            JobResult::Written(records, Err(e)) => {
                self.shared.failed(&e);
                self.shared.spool(&records);
            }
            JobResult::Replayed(path, offset, Ok(progress)) => {
                self.shared.recorded.fetch_add(progress.inserted as u64, Ordering::Relaxed);
                self.shared.flushed();
                self.shared
                    .spool
                    .replayed(progress.records as u64, progress.next_offset.saturating_sub(offset));
                if progress.at_end {
                    if let Err(e) = self.shared.spool.finish_replay(&path) {
                        tracing::error!(error = %e, "cannot remove the replayed usage spool");
                    } else {
                        tracing::info!("usage spool replayed");
                    }
                    state.replay = None;
                } else {
                    state.replay = Some((path, progress.next_offset));
                }
            }
            JobResult::Replayed(_, _, Err(e)) => self.shared.failed(&e),
        }
    }

    /// After the stop signal: takes every record still in the channel, lets a running write
    /// finish, writes the queue within [`SHUTDOWN_DEADLINE`], and spools what is left.
    async fn drain_and_stop(&self, state: &mut State) {
        state.rx.close();
        while let Some(pending) = state.rx.recv().await {
            state.queue.push_back(pending.into_record(&self.shared.prices));
        }
        let deadline = Instant::now() + SHUTDOWN_DEADLINE;
        if let Some(job) = state.job.take() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(remaining, job.handle).await {
                Ok(Ok(result)) => self.on_job(state, result),
                Ok(Err(e)) => tracing::error!(error = %e, "a usage write task failed"),
                // Unknown whether it committed: spool it (replays are idempotent).
                Err(_) => self.shared.spool(job.batch.as_deref().map_or(&[], Vec::as_slice)),
            }
        }
        while !state.queue.is_empty() {
            let n = state.queue.len().min(self.options.batch_size.max(1));
            let batch: Vec<UsageRecord> = state.queue.drain(..n).collect();
            let remaining = deadline.saturating_duration_since(Instant::now());
            let written = batch.clone();
            let write =
                self.db.run(move |conn| Ok(aigw_persistence::usage::insert_batch(conn, &written)?));
            match tokio::time::timeout(remaining, write).await {
                Ok(Ok(inserted)) => {
                    self.shared.recorded.fetch_add(inserted as u64, Ordering::Relaxed);
                    self.shared.flushed();
                }
                Ok(Err(e)) => {
                    self.shared.failed(&e);
                    self.shared.spool(&batch);
                    self.spool_queue(state);
                }
                Err(_) => {
                    self.shared.spool(&batch);
                    self.spool_queue(state);
                }
            }
        }
        self.shared.queued.store(0, Ordering::Relaxed);
        tracing::info!(spooled = self.shared.spool.records(), "usage recorder stopped");
    }
}

/// Replays one batch of a spool file from `offset`.
async fn replay_batch(
    db: &Db,
    path: PathBuf,
    offset: u64,
    batch_size: usize,
) -> Result<ReplayProgress, ServiceError> {
    let batch = tokio::task::spawn_blocking(move || Spool::read_batch(&path, offset, batch_size))
        .await
        .map_err(|e| ServiceError::Internal(format!("spool reader failed: {e}")))?
        .map_err(|e| ServiceError::Internal(format!("reading the usage spool: {e}")))?;
    if batch.skipped > 0 {
        tracing::warn!(lines = batch.skipped, "skipped usage spool lines that were cut short");
    }
    let records = batch.records.len() + batch.skipped;
    let inserted = if batch.records.is_empty() {
        0
    } else {
        let written = batch.records;
        db.run(move |conn| Ok(aigw_persistence::usage::insert_batch(conn, &written)?)).await?
    };
    Ok(ReplayProgress { next_offset: batch.next_offset, at_end: batch.at_end, records, inserted })
}
