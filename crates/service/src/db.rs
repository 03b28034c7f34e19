//! Runs blocking database work on a thread pool of its own, never on an async worker, and
//! bounds how long a request waits for it.
//!
//! The pool has as many threads as the connection pool has connections (`aigw-db`, kept
//! for a minute when idle). Each actix worker runs its own tokio runtime, and
//! `tokio::task::spawn_blocking` would start threads in each of them: a permit released a
//! moment before its thread was idle again let the next call start a new thread, and under
//! load there were 46 threads for 10 connections, each with its own allocator heap (14-18
//! threads in all with this pool: docs/performance.md).
//!
//! Every [`Db::run`] answers within `acquire_timeout_secs + statement_timeout_secs` (the
//! *deadline*), whatever the database does: waiting for a permit, checking out a connection
//! and running the closure all count against it. Past the deadline the caller gets
//! [`ServiceError::Unavailable`] (503 with `Retry-After`).
//!
//! A blocking thread cannot be interrupted. When the database hangs (a stopped process, a
//! network path that drops packets), the thread inside libpq stays blocked until the
//! database answers again, PostgreSQL's `statement_timeout` fires, or the kernel gives the
//! connection up (`tcp_user_timeout`, keepalives). Such a thread keeps its permit until it
//! returns, so at most `max_connections` threads can ever be stuck, and requests beyond
//! them wait (asynchronously, bounded by the deadline) instead of piling up more threads. If
//! a stuck closure later commits, its effect stands although the caller was told 503: that is
//! what `Idempotency-Key` is for (see `idempotency`).

use crate::error::ServiceError;
use aigw_persistence::{DbConnection, Pool};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// A handle to the connection pool that runs closures on the database threads.
///
/// At most as many closures run at once as the pool has connections; the others wait on an
/// async semaphore, not on a blocking thread, so a burst of requests does not park hundreds
/// of threads inside the pool's checkout.
#[derive(Debug, Clone)]
pub struct Db {
    pool: Pool,
    threads: Arc<Threads>,
    permits: Arc<Semaphore>,
    deadline: Duration,
    readiness: Arc<tokio::sync::Mutex<Option<Verdict>>>,
    node: Arc<str>,
    /// Closures waiting for a connection permit now (a capacity gauge).
    waiting: Arc<AtomicUsize>,
}

/// Counts a waiter for as long as it lives (also when its future is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The database threads: the blocking pool of a tokio runtime that runs nothing else (its
/// scheduler is never driven), bounded to the connection pool's size.
#[derive(Debug)]
struct Threads {
    handle: tokio::runtime::Handle,
    /// Taken only when the threads are dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Threads {
    /// How long an idle database thread is kept before it exits.
    const KEEP_ALIVE: Duration = Duration::from_secs(60);

    fn new(count: usize) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(count.max(1))
            .thread_keep_alive(Self::KEEP_ALIVE)
            .thread_name("aigw-db")
            .build()?;
        Ok(Self { handle: runtime.handle().clone(), runtime: Some(runtime) })
    }
}

impl Drop for Threads {
    /// Lets running closures finish on their own: the last `Db` may be dropped on an async
    /// thread, where a runtime must not wait.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A readiness verdict and when it was reached.
type Verdict = (Instant, Result<(), String>);

/// How long one readiness verdict is reused, so that probes (which are unauthenticated)
/// cost at most two small writes a second whatever their number.
const READINESS_REUSE: Duration = Duration::from_millis(500);

/// How long a readiness probe waits for the database (`/readyz` must answer within 2 s).
pub const PING_TIMEOUT: Duration = Duration::from_millis(1500);

impl Db {
    /// Wraps a pool and starts its threads (one per connection, on first use); the deadline
    /// is the pool's acquire plus statement timeout.
    ///
    /// # Errors
    /// The operating system's error when the thread pool cannot be set up.
    pub fn new(pool: Pool) -> std::io::Result<Self> {
        let permits = usize::try_from(pool.max_size()).unwrap_or(1).max(1);
        let threads = Arc::new(Threads::new(permits)?);
        let options = pool.options();
        let deadline = Duration::from_secs(
            options
                .acquire_timeout_secs
                .max(1)
                .saturating_add(options.statement_timeout_secs.max(1)),
        );
        Ok(Self {
            pool,
            threads,
            permits: Arc::new(Semaphore::new(permits)),
            deadline,
            readiness: Arc::new(tokio::sync::Mutex::new(None)),
            node: Arc::from(uuid::Uuid::now_v7().to_string()),
            waiting: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Connections in use now, closures waiting for one, and the pool's size.
    pub fn load(&self) -> (usize, usize, usize) {
        let size = usize::try_from(self.pool.max_size()).unwrap_or(1).max(1);
        let in_use = size.saturating_sub(self.permits.available_permits());
        (in_use, self.waiting.load(Ordering::Relaxed), size)
    }

    /// The longest a [`Db::run`] takes before it answers unavailable.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The pool itself (for connections kept outside it, such as the change-feed tailer's).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Checks out a connection and runs `f` on it, both on a database thread, within the
    /// deadline.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when no connection can be had, or no answer comes, within
    /// the deadline, or the database reports a fault of its own (full, read-only, busy);
    /// whatever `f` returns; [`ServiceError::Internal`] if `f` panicked.
    pub async fn run<T, F>(&self, f: F) -> Result<T, ServiceError>
    where
        T: Send + 'static,
        F: FnOnce(&mut DbConnection) -> Result<T, ServiceError> + Send + 'static,
    {
        self.run_within(self.deadline, f).await
    }

    async fn run_within<T, F>(&self, deadline: Duration, f: F) -> Result<T, ServiceError>
    where
        T: Send + 'static,
        F: FnOnce(&mut DbConnection) -> Result<T, ServiceError> + Send + 'static,
    {
        let work = async {
            let permit = match self.permits.clone().try_acquire_owned() {
                Ok(permit) => permit,
                Err(_) => {
                    let _waiting = Waiting::enter(&self.waiting);
                    self.permits.clone().acquire_owned().await.map_err(|e| {
                        ServiceError::Internal(format!("database semaphore closed: {e}"))
                    })?
                }
            };
            let pool = self.pool.clone();
            self.threads
                .handle
                .spawn_blocking(move || {
                    // Held until the thread returns, even when the caller has given up: this bounds
                    // the threads a hung database can hold to the pool size.
                    let _permit = permit;
                    let mut conn = pool.get()?;
                    let result = f(&mut conn);
                    if result.is_err() && Pool::is_broken(&mut conn) {
                        // One lost connection mostly means the server ended them all (a
                        // restart, a failover): the idle ones are checked now rather than
                        // failing the next callers one by one.
                        drop(conn);
                        pool.sweep_idle();
                    }
                    result
                })
                .await
                .map_err(|e| ServiceError::Internal(format!("database task failed: {e}")))?
        };
        match tokio::time::timeout(deadline, work).await {
            Ok(result) => result,
            Err(_) => Err(ServiceError::Unavailable(format!(
                "no answer from the database within {} ms",
                deadline.as_millis()
            ))),
        }
    }

    /// Readiness: the database answers a read and commits a one-row write (this node's row
    /// of `health_checks`) within [`PING_TIMEOUT`], so a hung, unreachable, full or read-only
    /// database is reported. Concurrent calls share one probe, and a success is reused for
    /// 500 ms, so probes cost little and `/readyz` answers within 2 s of a change either way.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] naming the cause.
    pub async fn readiness(&self) -> Result<(), ServiceError> {
        let arrived = Instant::now();
        let mut cached = self.readiness.lock().await;
        if let Some((at, verdict)) = cached.as_ref() {
            // A verdict reached while this call waited is fresh; a success is also reused for
            // a moment. A failure is never reused later, so recovery shows at once.
            if *at >= arrived || (verdict.is_ok() && at.elapsed() < READINESS_REUSE) {
                return verdict.clone().map_err(ServiceError::Unavailable);
            }
        }
        let started = Instant::now();
        let mut verdict = Err(String::new());
        // A second try when the first failed fast: a pooled connection broken by an earlier
        // outage fails once and is discarded, which says nothing about the database now.
        for _ in 0..2 {
            let Some(left) = PING_TIMEOUT.checked_sub(started.elapsed()) else {
                break;
            };
            let node = self.node.clone();
            verdict = self
                .run_within(left, move |conn| {
                    let now = aigw_domain::time::now();
                    Ok(aigw_persistence::health::probe(conn, &node, now)?)
                })
                .await
                .map_err(|e| e.to_string());
            if verdict.is_ok() {
                break;
            }
        }
        *cached = Some((Instant::now(), verdict.clone()));
        verdict.map_err(ServiceError::Unavailable)
    }
}
