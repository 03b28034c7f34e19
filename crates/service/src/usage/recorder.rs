//! The recorder: a supervised background task that writes what the node metered to the
//! usage ledger, one flush per interval, off the request path.
//!
//! ```text
//! request path --add--> per-thread sums (+ records) --take, every interval--> one flush
//!                                                          |  database failing or slow
//!                       database <--apply, once by id-- flush --> spool file (fsync)
//!                                  <--------- replayed on recovery and at start ------+
//! ```
//!
//! - The request path finishes its call's record (usage, estimate, cost) on its own thread
//!   and adds it to that thread's shard of the [`Aggregate`]: no channel, no lock shared by
//!   every worker, no wait for the database. Only an estimate (a provider that reported no
//!   usage) runs on the blocking pool instead, since tokenizing a long prompt takes time.
//! - Every `flush_interval_ms` (sooner when per-request records pile up) the task takes the
//!   aggregate as one [`UsageFlush`] and applies it in one transaction
//!   ([`aigw_persistence::usage::apply_flush`]): statements per second grow with the keys and
//!   models active, not with the call rate.
//! - A failed write sends its flush to the spool. While the database fails, or while a write
//!   takes longer than an interval, each interval's flush goes to the spool (nothing waits in
//!   memory longer than an interval), and the replay of the spool is what probes the
//!   database; once it succeeds, direct writes resume and the spool drains in the
//!   background. At start the spool is replayed too.
//! - So a crash (`kill -9`, power cut) loses at most what was metered since the last flush,
//!   plus a flush whose database write was in flight (normally milliseconds). docs/usage.md
//!   states this bound.
//! - [`Recorder::shutdown`] (after SIGTERM, once the HTTP server has stopped) writes what is
//!   left within [`SHUTDOWN_DEADLINE`] and spools the rest.
//! - Writes of the ledger and of the calls in flight take turns (`ledger_lock`): a flush
//!   deletes the rows of the calls it counts, so no such row may be half-written meanwhile.
//! - The task runs under a supervisor that restarts it if it panics; its state (the running
//!   write, the replay position) lives outside the task and survives the restart.

use super::aggregate::{Added, Aggregate, KeepRecords};
use super::pending::{Pending, Settlement};
use super::spool::Spool;
use super::supervisor::supervise;
use crate::db::Db;
use crate::error::ServiceError;
use crate::metrics::name as metric;
use crate::prices::PriceTable;
use crate::spend_signal::SpendSignal;
use aigw_domain::ledger::{UsageFlush, UsageSums};
use aigw_domain::usage::UsageRecord;
use aigw_persistence::usage::FlushApplied;
use chrono::{DateTime, Utc};
use metrics::Counter;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// How long [`Recorder::shutdown`] keeps trying the database before it spools the rest.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// Flushes of the spool applied per replay step.
const REPLAY_BATCH: usize = 16;

/// Log target of the per-request usage lines (`usage.request_log`).
pub const USAGE_LOG_TARGET: &str = "aigw::usage";

/// Settings of a [`Recorder`].
#[derive(Debug, Clone)]
pub struct RecorderOptions {
    /// Most time between two flushes.
    pub flush_interval: Duration,
    /// Per-request records held in memory between two flushes (beyond: dropped and counted;
    /// the sums stay exact).
    pub queue_capacity: usize,
    /// Whether per-request records are written to the database.
    pub keep_records: KeepRecords,
    /// Whether each call is also written as one log line (target [`USAGE_LOG_TARGET`]).
    pub request_log: bool,
    /// Folder of the spool file.
    pub spool_dir: PathBuf,
    /// Where tokens and cost by model are counted (`aigw_tokens_total`,
    /// `aigw_cost_usd_micros_total`).
    pub metrics: crate::metrics::Metrics,
    /// Told which keys' budgets each written flush spent (for budget alerts).
    pub signals: crate::spend_signal::SpendSignals,
}

/// A snapshot of the recorder's health, for `/readyz` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderHealth {
    /// Calls metered and not yet written or spooled (those of the running write included).
    pub queued: u64,
    /// Of those, the calls of the write running now.
    pub writing: u64,
    /// Calls waiting in the spool file.
    pub spooled: u64,
    /// Bytes of the spool file.
    pub spool_bytes: u64,
    /// When a write to the database last succeeded, UTC.
    pub last_flush_at: Option<DateTime<Utc>>,
    /// Whether the last write to the database succeeded (true before the first).
    pub database_ok: bool,
    /// Calls written to the ledger since start (replays of flushes already there excluded).
    pub recorded: u64,
    /// Flushes written to the ledger since start.
    pub flushes: u64,
    /// Times the task was restarted after a panic.
    pub restarts: u64,
    /// Calls that could be neither written nor spooled (the spool failed too).
    pub lost: u64,
    /// Per-request records dropped because memory for them was full (their calls still
    /// count in the sums).
    pub records_dropped: u64,
}

/// What the request path, the task and the health probe share.
#[derive(Debug)]
struct Shared {
    prices: PriceTable,
    spool: Spool,
    aggregate: Aggregate,
    request_log: bool,
    /// Wakes the task before its interval ends (records piling up).
    wake: Notify,
    in_write: AtomicU64,
    database_ok: AtomicBool,
    last_flush_at: Mutex<Option<DateTime<Utc>>>,
    recorded: AtomicU64,
    flushes: AtomicU64,
    restarts: Arc<AtomicU64>,
    lost: AtomicU64,
    records_dropped: AtomicU64,
    /// Held by every write of the ledger and of the calls in flight (see the module docs).
    ledger_lock: Arc<tokio::sync::Mutex<()>>,
    signals: crate::spend_signal::SpendSignals,
}

impl Shared {
    /// Appends `flush` to the spool; counts its calls as lost if even that fails.
    fn spool(&self, flush: &UsageFlush) {
        if let Err(e) = self.spool.append(flush) {
            self.lost.fetch_add(flush.calls(), Ordering::Relaxed);
            tracing::error!(error = %e, calls = flush.calls(), "usage could not be spooled; it is lost");
        }
    }

    fn flushed(&self) {
        self.database_ok.store(true, Ordering::Relaxed);
        *self.last_flush_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(aigw_domain::time::now());
    }

    fn failed(&self, e: &ServiceError) {
        if self.database_ok.swap(false, Ordering::Relaxed) {
            tracing::warn!(error = %e, "writing usage failed; spooling it until the database answers");
        }
    }

    /// Counts a finished call (on the thread that finished it), with the settlement to apply
    /// once it is written.
    fn accept(&self, record: UsageRecord, tracked: bool, settlement: Option<Settlement>) {
        if self.request_log {
            log_record(&record);
        }
        if self.aggregate.add(record, tracked, settlement) == Added::FlushSoon {
            self.wake.notify_one();
        }
    }
}

/// One call as one structured log line (target [`USAGE_LOG_TARGET`], message `usage`).
fn log_record(r: &UsageRecord) {
    tracing::info!(
        target: USAGE_LOG_TARGET,
        request_id = %r.request_id,
        api_key_id = %r.api_key_id,
        user_id = %r.user_id,
        team_id = r.team_id.as_deref(),
        member_id = r.member_id.as_deref(),
        model = %r.model,
        provider = %r.provider,
        endpoint = r.endpoint.as_str(),
        streamed = r.streamed,
        outcome = r.outcome.as_str(),
        prompt_tokens = r.tokens.prompt_tokens,
        completion_tokens = r.tokens.completion_tokens,
        total_tokens = r.tokens.total_tokens,
        cached_tokens = r.tokens.cached_tokens,
        cache_write_tokens = r.tokens.cache_write_tokens,
        reasoning_tokens = r.tokens.reasoning_tokens,
        estimated = r.estimated,
        cost_micros = r.cost_micros,
        priced = r.priced,
        latency_ms = r.latency_ms,
        started_at = %r.started_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "usage"
    );
}

/// The request path's end of the recorder: cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct RecorderHandle {
    shared: Arc<Shared>,
}

impl RecorderHandle {
    /// The prices records are priced with.
    pub(crate) fn prices(&self) -> &PriceTable {
        &self.shared.prices
    }

    /// The lock writes of the calls in flight take (see the module docs).
    pub(crate) fn ledger_lock(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.shared.ledger_lock.clone()
    }

    /// Counts a metered call without waiting: its record is finished here (on the blocking
    /// pool when it needs a tokenizer estimate) and added to this thread's sums.
    pub(crate) fn submit(&self, pending: Pending) {
        let known = pending.known_usage();
        if known.is_none() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let shared = self.shared.clone();
                runtime.spawn_blocking(move || {
                    let (record, tracked, settlement) = pending.finish(&shared.prices, None);
                    shared.accept(record, tracked, settlement);
                });
                return;
            }
        }
        let (record, tracked, settlement) = pending.finish(&self.shared.prices, known);
        self.shared.accept(record, tracked, settlement);
    }

    /// Counts a finished call (for an embedder or a benchmark feeding records directly).
    pub(crate) fn submit_record(&self, record: UsageRecord) {
        self.shared.accept(record, false, None);
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
#[derive(Debug, Default)]
struct State {
    job: Option<Job>,
    /// The spool file being replayed and the offset of its next batch.
    replay: Option<(PathBuf, u64)>,
    /// `aigw_tokens_total` (prompt, completion, cached, cache_write, reasoning) and
    /// `aigw_cost_usd_micros_total` by provider and model, registered once (configured models
    /// only: a bounded set).
    counters: HashMap<(String, String), [Counter; 6]>,
}

#[derive(Debug)]
struct Job {
    started: Instant,
    /// The flush being written, kept to spool it if it cannot finish at shutdown.
    flush: Option<Arc<UsageFlush>>,
    handle: JoinHandle<JobResult>,
}

#[derive(Debug)]
enum JobResult {
    /// A flush written (or not), with the settlements of its tracked calls.
    Written(Arc<UsageFlush>, Result<FlushApplied, ServiceError>, Vec<Settlement>),
    Replayed(PathBuf, u64, Result<ReplayProgress, ServiceError>),
}

#[derive(Debug)]
struct ReplayProgress {
    next_offset: u64,
    at_end: bool,
    calls: u64,
    recorded: u64,
    /// The keys whose calls the batch wrote (a key may appear once per flush).
    spent: Vec<SpendSignal>,
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
            tracing::info!(calls = spool.records(), "usage spool found; replaying it");
        }
        let shared = Arc::new(Shared {
            prices,
            spool,
            aggregate: Aggregate::new(options.keep_records, options.queue_capacity.max(1)),
            request_log: options.request_log,
            wake: Notify::new(),
            in_write: AtomicU64::new(0),
            database_ok: AtomicBool::new(true),
            last_flush_at: Mutex::new(None),
            recorded: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            restarts: Arc::new(AtomicU64::new(0)),
            lost: AtomicU64::new(0),
            records_dropped: AtomicU64::new(0),
            ledger_lock: Arc::new(tokio::sync::Mutex::new(())),
            signals: options.signals.clone(),
        });
        let state = Arc::new(tokio::sync::Mutex::new(State::default()));
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
            handle: RecorderHandle { shared },
            stop,
            supervisor: Mutex::new(Some(supervisor)),
        })
    }

    /// The lock writes of the calls in flight take turns with flushes through.
    pub(crate) fn ledger_lock(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.handle.ledger_lock()
    }

    /// The handle meters feed this recorder through (for the gateway's meter).
    pub(crate) fn handle(&self) -> RecorderHandle {
        self.handle.clone()
    }

    /// Counts one finished call as the gateway's meter does, without a gateway: for embedders
    /// that meter calls of their own, and for the metering benchmark. The record's budgets
    /// are not settled (it holds none).
    pub fn record(&self, record: UsageRecord) {
        self.handle.submit_record(record);
    }

    /// The current health.
    pub fn health(&self) -> RecorderHealth {
        let shared = &self.handle.shared;
        RecorderHealth {
            queued: shared.aggregate.pending() + shared.in_write.load(Ordering::Relaxed),
            writing: shared.in_write.load(Ordering::Relaxed),
            spooled: shared.spool.records(),
            spool_bytes: shared.spool.bytes(),
            last_flush_at: *shared
                .last_flush_at
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            database_ok: shared.database_ok.load(Ordering::Relaxed),
            recorded: shared.recorded.load(Ordering::Relaxed),
            flushes: shared.flushes.load(Ordering::Relaxed),
            restarts: shared.restarts.load(Ordering::Relaxed),
            lost: shared.lost.load(Ordering::Relaxed),
            records_dropped: shared.records_dropped.load(Ordering::Relaxed),
        }
    }

    /// Stops the task after writing everything metered to the database (within
    /// [`SHUTDOWN_DEADLINE`]) or else to the spool. Calls counted afterwards wait in memory
    /// and are lost at exit. Idempotent.
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
                    // Records may have piled up during the write.
                    if self.shared.database_ok.load(Ordering::Relaxed)
                        && self.shared.aggregate.wants_flush()
                    {
                        self.start_write(state);
                    }
                }
                () = self.shared.wake.notified() => {
                    if state.job.is_none() && self.shared.database_ok.load(Ordering::Relaxed) {
                        self.start_write(state);
                    }
                }
                _ = tick.tick() => self.on_tick(state, interval),
            }
        }
    }

    /// Takes what was metered since the last take as one flush (with a fresh id), counting it
    /// in the per-model metrics, with the settlements to apply once it is written or spooled.
    fn take(&self, state: &mut State) -> (UsageFlush, Vec<Settlement>) {
        let taken = self.shared.aggregate.take();
        let settlements = taken.settlements;
        let mut flush = taken.flush;
        if taken.dropped > 0 {
            self.shared.records_dropped.fetch_add(taken.dropped, Ordering::Relaxed);
            tracing::warn!(
                dropped = taken.dropped,
                "per-request usage records dropped: memory for them was full (their calls are counted)"
            );
        }
        if flush.is_empty() {
            return (flush, settlements);
        }
        flush.id = uuid::Uuid::now_v7().to_string();
        let metrics = &self.options.metrics;
        let mut count = |provider: &str, model: &str, s: &UsageSums| {
            if state.counters.len() >= 1024 {
                state.counters.clear();
            }
            let counters = state
                .counters
                .entry((provider.to_owned(), model.to_owned()))
                .or_insert_with(|| {
                    let labels = [("provider", provider), ("model", model)];
                    let [p, m] = labels;
                    let tokens =
                        |kind| metrics.counter(metric::TOKENS_TOTAL, &[p, m, ("kind", kind)]);
                    [
                        tokens("prompt"),
                        tokens("completion"),
                        tokens("cached"),
                        tokens("cache_write"),
                        tokens("reasoning"),
                        metrics.counter(metric::COST_USD_MICROS_TOTAL, &labels),
                    ]
                });
            let amounts = [
                s.prompt_tokens,
                s.completion_tokens,
                s.cached_tokens,
                s.cache_write_tokens,
                s.reasoning_tokens,
                s.cost_micros,
            ];
            for (counter, amount) in counters.iter().zip(amounts) {
                counter.increment(amount);
            }
        };
        for r in &flush.rollups {
            count(&r.key.provider, &r.key.model, &r.sums);
        }
        for r in &flush.tracked {
            count(&r.provider, &r.model, &UsageSums::of(r));
        }
        (flush, settlements)
    }

    fn on_tick(&self, state: &mut State, interval: Duration) {
        match &state.job {
            Some(job) if job.started.elapsed() >= interval => {
                // The database is slow: nothing waits in memory beyond an interval.
                let (flush, settlements) = self.take(state);
                self.shared.spool(&flush);
                settle(settlements);
            }
            Some(_) => {}
            None if !self.shared.database_ok.load(Ordering::Relaxed) => {
                let (flush, settlements) = self.take(state);
                self.shared.spool(&flush);
                settle(settlements);
                self.start_replay(state);
            }
            None => {
                if !self.start_write(state) {
                    self.start_replay(state);
                }
            }
        }
    }

    /// Starts writing what was metered since the last take; false when there was nothing.
    fn start_write(&self, state: &mut State) -> bool {
        let (flush, settlements) = self.take(state);
        if flush.is_empty() {
            settle(settlements);
            return false;
        }
        let flush = Arc::new(flush);
        self.shared.in_write.store(flush.calls(), Ordering::Relaxed);
        let (db, written, lock) = (self.db.clone(), flush.clone(), self.shared.ledger_lock.clone());
        let handle = tokio::spawn(async move {
            let _turn = lock.lock_owned().await;
            let result = write_flush(&db, written.clone()).await;
            JobResult::Written(written, result, settlements)
        });
        state.job = Some(Job { started: Instant::now(), flush: Some(flush), handle });
        true
    }

    /// Starts replaying the next batch of the spool, if it holds anything.
    fn start_replay(&self, state: &mut State) {
        if state.job.is_some() {
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
            let (db, lock) = (self.db.clone(), self.shared.ledger_lock.clone());
            let handle = tokio::spawn(async move {
                let _turn = lock.lock_owned().await;
                let result = replay_batch(&db, path.clone(), offset).await;
                JobResult::Replayed(path, offset, result)
            });
            state.job = Some(Job { started: Instant::now(), flush: None, handle });
        }
    }

    fn on_job(&self, state: &mut State, result: JobResult) {
        self.shared.in_write.store(0, Ordering::Relaxed);
        match result {
            JobResult::Written(flush, Ok(applied), settlements) => {
                self.note_applied(&applied, &flush);
                self.shared.flushed();
                settle(settlements);
                if self.shared.signals.listened() {
                    self.shared.signals.send(spent_by(&flush));
                }
            }
            JobResult::Written(flush, Err(e), settlements) => {
                self.shared.failed(&e);
                self.shared.spool(&flush);
                settle(settlements);
            }
            JobResult::Replayed(path, offset, Ok(progress)) => {
                self.shared.recorded.fetch_add(progress.recorded, Ordering::Relaxed);
                self.shared.signals.send(progress.spent);
                self.shared.flushed();
                self.shared
                    .spool
                    .replayed(progress.calls, progress.next_offset.saturating_sub(offset));
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

    fn note_applied(&self, applied: &FlushApplied, flush: &UsageFlush) {
        self.shared.recorded.fetch_add(applied.calls, Ordering::Relaxed);
        if applied.applied {
            self.shared.flushes.fetch_add(1, Ordering::Relaxed);
        }
        if applied.already_billed > 0 {
            tracing::info!(
                calls = applied.already_billed,
                flush = %flush.id,
                "calls already billed as interrupted by another node were not counted again"
            );
        }
    }

    /// After the stop signal: lets a running write finish, writes what is left within
    /// [`SHUTDOWN_DEADLINE`], and spools what it cannot write.
    async fn drain_and_stop(&self, state: &mut State) {
        let deadline = Instant::now() + SHUTDOWN_DEADLINE;
        if let Some(job) = state.job.take() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(remaining, job.handle).await {
                Ok(Ok(result)) => self.on_job(state, result),
                Ok(Err(e)) => tracing::error!(error = %e, "a usage write task failed"),
                // Unknown whether it committed: spool it (a flush is applied once).
                Err(_) => {
                    if let Some(flush) = job.flush {
                        self.shared.spool(&flush);
                    }
                }
            }
        }
        let (flush, settlements) = self.take(state);
        let flush = Arc::new(flush);
        if !flush.is_empty() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let write = write_flush(&self.db, flush.clone());
            let turn = self.shared.ledger_lock.clone();
            let write = async move {
                let _turn = turn.lock().await;
                write.await
            };
            match tokio::time::timeout(remaining, write).await {
                Ok(Ok(applied)) => {
                    self.note_applied(&applied, &flush);
                    self.shared.flushed();
                }
                Ok(Err(e)) => {
                    self.shared.failed(&e);
                    self.shared.spool(&flush);
                }
                Err(_) => self.shared.spool(&flush),
            }
        }
        settle(settlements);
        tracing::info!(spooled = self.shared.spool.records(), "usage recorder stopped");
    }
}

/// Writes `flush` in one transaction.
async fn write_flush(db: &Db, flush: Arc<UsageFlush>) -> Result<FlushApplied, ServiceError> {
    db.run(move |conn| Ok(aigw_persistence::usage::apply_flush(conn, &flush)?)).await
}

/// Applies the next flushes of a spool file from `offset`.
async fn replay_batch(db: &Db, path: PathBuf, offset: u64) -> Result<ReplayProgress, ServiceError> {
    let batch = tokio::task::spawn_blocking(move || Spool::read_batch(&path, offset, REPLAY_BATCH))
        .await
        .map_err(|e| ServiceError::Internal(format!("spool reader failed: {e}")))?
        .map_err(|e| ServiceError::Internal(format!("reading the usage spool: {e}")))?;
    if batch.skipped > 0 {
        tracing::warn!(lines = batch.skipped, "skipped usage spool lines that were cut short");
    }
    let calls: u64 = batch.flushes.iter().map(UsageFlush::calls).sum();
    let spent = batch.flushes.iter().flat_map(spent_by).collect();
    let flushes = batch.flushes;
    let recorded = db
        .run(move |conn| {
            let mut recorded = 0;
            for flush in &flushes {
                recorded += aigw_persistence::usage::apply_flush(conn, flush)?.calls;
            }
            Ok(recorded)
        })
        .await?;
    Ok(ReplayProgress {
        next_offset: batch.next_offset,
        at_end: batch.at_end,
        calls,
        recorded,
        spent,
    })
}

/// The keys whose calls `flush` wrote, once each.
fn spent_by(flush: &UsageFlush) -> Vec<SpendSignal> {
    let rollups = flush.rollups.iter().map(|r| {
        (&r.key.api_key_id, &r.key.user_id, r.key.team_id.as_ref(), r.key.member_id.is_some())
    });
    let tracked = flush
        .tracked
        .iter()
        .map(|r| (&r.api_key_id, &r.user_id, r.team_id.as_ref(), r.member_id.is_some()));
    let mut seen = std::collections::HashSet::new();
    rollups
        .chain(tracked)
        .filter(|(key_id, ..)| seen.insert(*key_id))
        .map(|(key_id, user_id, team_id, member)| SpendSignal {
            key_id: key_id.clone(),
            user_id: user_id.clone(),
            team_id: team_id.cloned(),
            member,
            refused: None,
        })
        .collect()
}

/// Applies the settlements of calls now in the ledger (or the spool).
fn settle(settlements: Vec<Settlement>) {
    for settlement in settlements {
        settlement.apply();
    }
}
