//! Password hashing: argon2id (OWASP Password Storage Cheat Sheet: m = 19456 KiB, t = 2,
//! p = 1), off the async workers, on a dedicated pool of `max_concurrent` threads (rayon).
//!
//! Each hash holds `m` KiB. Running hashes on a fixed, small set of threads bounds both how
//! many run at once (a burst of logins queues instead of exhausting memory or starving other
//! work) and how much memory the allocator keeps cached afterwards: measured with
//! `scripts/bench.sh`, hashing on tokio's general blocking pool (~100 threads under load) left
//! the process at 1.9 GB resident after a login burst, because every thread's allocator arena
//! kept its 19 MiB blocks. A semaphore in front keeps the queue itself bounded.

use crate::error::ServiceError;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use serde::Deserialize;
use std::sync::Arc;
use tokio::sync::{OnceCell, Semaphore};

/// The one answer to every failed login, whatever the cause.
pub(crate) const LOGIN_FAILED: &str = "invalid e-mail or password";

/// argon2id parameters (`[auth.argon2]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Argon2Config {
    /// Memory cost in KiB (default 19456 = 19 MiB).
    pub memory_kib: u32,
    /// Iterations (default 2).
    pub iterations: u32,
    /// Parallelism (default 1).
    pub parallelism: u32,
    /// Most hashes computed at once (default: the number of CPUs).
    pub max_concurrent: usize,
    /// Most hashes waiting for a hashing thread beyond those running (default 16 per thread,
    /// about a third of a second of work). A hash beyond them is refused at once: 503
    /// `service_unavailable` with `Retry-After: 1`.
    pub max_queued: usize,
}

impl Default for Argon2Config {
    fn default() -> Self {
        Self {
            memory_kib: 19_456,
            iterations: 2,
            parallelism: 1,
            max_concurrent: std::thread::available_parallelism().map_or(2, |n| n.get()),
            max_queued: 16 * std::thread::available_parallelism().map_or(2, |n| n.get()),
        }
    }
}

/// Hashes and verifies passwords off the async workers.
#[derive(Clone)]
pub struct PasswordHasher {
    params: Params,
    permits: Arc<Semaphore>,
    pool: Arc<rayon::ThreadPool>,
    dummy_hash: Arc<OnceCell<String>>,
    max_queued: usize,
}

impl std::fmt::Debug for PasswordHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordHasher")
            .field("params", &self.params)
            .field("threads", &self.pool.current_num_threads())
            .finish_non_exhaustive()
    }
}

/// The outcome of [`PasswordHasher::verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// Wrong password (or no such account).
    Mismatch,
    /// Right password; the stored hash uses the configured parameters.
    Match,
    /// Right password; the stored hash uses other parameters and should be replaced.
    MatchNeedsRehash,
}

impl PasswordHasher {
    /// A hasher with the given parameters.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when argon2 refuses the parameters.
    pub fn new(config: &Argon2Config) -> Result<Self, ServiceError> {
        let params = Params::new(config.memory_kib, config.iterations, config.parallelism, None)
            .map_err(|e| ServiceError::Internal(format!("bad argon2 parameters: {e}")))?;
        let threads = config.max_concurrent.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("aigw-argon2-{i}"))
            // Below the request workers (nice 19): a login storm then takes the CPU that
            // requests leave, instead of adding milliseconds to every request's latency
            // (the git history of docs/performance.md). Hashes still progress under load.
            .start_handler(|_| {
                let low = thread_priority::ThreadPriorityValue::try_from(0u8)
                    .map(thread_priority::ThreadPriority::Crossplatform);
                if let Ok(low) = low {
                    if let Err(e) = thread_priority::set_current_thread_priority(low) {
                        tracing::debug!(error = ?e, "cannot lower the priority of a hashing thread");
                    }
                }
            })
            .build()
            .map_err(|e| ServiceError::Internal(format!("password hashing threads: {e}")))?;
        Ok(Self {
            params,
            // Running plus queued hashes: beyond them a hash is refused (503), so a flood of
            // logins cannot queue unbounded work or memory.
            permits: Arc::new(Semaphore::new(threads.saturating_add(config.max_queued))),
            pool: Arc::new(pool),
            dummy_hash: Arc::new(OnceCell::new()),
            max_queued: config.max_queued,
        })
    }

    /// Hashes running or waiting now, and the threads that run them.
    pub fn load(&self) -> (usize, usize) {
        let threads = self.pool.current_num_threads();
        let capacity = threads.saturating_add(self.max_queued);
        (capacity.saturating_sub(self.permits.available_permits()), threads)
    }

    fn argon2(params: Params) -> Argon2<'static> {
        Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
    }

    /// Runs `f` on the hashing threads, and waits for it without blocking the async worker;
    /// refused at once when `max_concurrent + max_queued` hashes are already running or
    /// waiting.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ServiceError> {
        let _permit = self.permits.try_acquire().map_err(|e| match e {
            tokio::sync::TryAcquireError::NoPermits => {
                ServiceError::Busy { what: "password hashing queue", retry_after_secs: 1 }
            }
            tokio::sync::TryAcquireError::Closed => {
                ServiceError::Internal("hashing semaphore closed".to_owned())
            }
        })?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.pool.spawn(move || {
            let _ = tx.send(f());
        });
        rx.await.map_err(|_| ServiceError::Internal("hashing task failed".to_owned()))
    }

    /// Hashes `password` with a fresh random salt into a PHC string (`$argon2id$v=19$…`).
    ///
    /// # Errors
    /// [`ServiceError::Busy`] when the queue is full; [`ServiceError::Internal`] if hashing
    /// fails.
    pub async fn hash(&self, password: String) -> Result<String, ServiceError> {
        let params = self.params.clone();
        self.blocking(move || {
            let salt = SaltString::generate(&mut OsRng);
            Self::argon2(params)
                .hash_password(password.as_bytes(), &salt)
                .map(|h| h.to_string())
                .map_err(|e| ServiceError::Internal(format!("hashing failed: {e}")))
        })
        .await?
    }

    /// Verifies `password` against `stored` (a PHC string), or against a dummy hash of the same
    /// cost when `stored` is `None`, so an unknown account costs as much time as a wrong
    /// password.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] if hashing fails.
    pub async fn verify(
        &self,
        password: String,
        stored: Option<String>,
    ) -> Result<Verification, ServiceError> {
        let (hash, real) = match stored {
            Some(h) => (h, true),
            None => (self.dummy_hash().await?, false),
        };
        let params = self.params.clone();
        self.blocking(move || {
            let Ok(parsed) = PasswordHash::new(&hash) else {
                return Verification::Mismatch;
            };
            // The stored hash carries its own parameters; verify with them.
            let ok = Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok();
            if !ok || !real {
                return Verification::Mismatch;
            }
            let current = Params::try_from(&parsed).ok();
            let same = current.is_some_and(|p| {
                p.m_cost() == params.m_cost()
                    && p.t_cost() == params.t_cost()
                    && p.p_cost() == params.p_cost()
            }) && parsed.algorithm.as_str() == "argon2id";
            if same {
                Verification::Match
            } else {
                Verification::MatchNeedsRehash
            }
        })
        .await
    }

    async fn dummy_hash(&self) -> Result<String, ServiceError> {
        self.dummy_hash
            .get_or_try_init(|| async {
                let random = format!("{:x}", rand::random::<u128>());
                self.hash(random).await
            })
            .await
            .cloned()
    }
}
