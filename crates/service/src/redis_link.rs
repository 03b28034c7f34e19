//! The node's connection to Redis (`rate_limit.redis_url`), shared by the named rate-limit
//! policies (`rate_limit.backend = "redis"`) and keys' counters (`gateway.key_counters =
//! "redis"`): one connection manager, one health state, one count of fallbacks.
//!
//! Failure handling: each call waits at most `redis_timeout_ms`. A failure (refused
//! connection, timeout, script error) is logged - at most once a minute, with the number of
//! failures in between - and the caller falls back (the named policies to the node's memory
//! limiter, keys' counters to the database). For the next `redis_retry_secs` Redis is not
//! tried at all (no request pays the timeout); then one call tries again, and on success the
//! node is back on Redis and says so in the log.

use crate::error::ServiceError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Log a Redis failure at most this often.
const LOG_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct Health {
    /// Redis is not tried before this instant.
    down_until: Option<Instant>,
    /// Whether the last attempt failed.
    failing: bool,
    /// When a failure was last logged.
    last_logged: Option<Instant>,
    /// Failures not logged since then.
    unlogged: u64,
}

struct Inner {
    manager: ConnectionManager,
    timeout: Duration,
    retry: Duration,
    url_for_logs: String,
    health: Mutex<Health>,
    /// Calls decided without Redis because it was unavailable (memory or database).
    fallbacks: AtomicU64,
    /// Outages that ended (a success after a failure), since start.
    outages_ended: AtomicU64,
}

/// A shared, lazily connected Redis connection with back-off (cheap to clone).
#[derive(Clone)]
pub struct RedisLink {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLink").field("url", &self.inner.url_for_logs).finish_non_exhaustive()
    }
}

impl RedisLink {
    /// A link to `redis_url` (`rate_limit.redis_url`) whose every command gives up after
    /// `timeout_ms` milliseconds (at least 1), and which is not tried again for `retry_secs`
    /// seconds after a failure. Nothing connects before the first call, so a node starts even
    /// while Redis is down.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] naming `rate_limit.redis_url` when it cannot be parsed.
    pub fn new(redis_url: &str, timeout_ms: u64, retry_secs: u64) -> Result<Self, ServiceError> {
        let url_for_logs = aigw_domain::redact::redact_url(redis_url);
        let client = redis::Client::open(redis_url).map_err(|e| {
            ServiceError::Internal(format!("rate_limit.redis_url {url_for_logs}: {e}"))
        })?;
        let timeout = Duration::from_millis(timeout_ms.max(1));
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_lazy_with_config(client, manager_config)
            .map_err(|e| ServiceError::Internal(format!("Redis connection manager: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                manager,
                timeout,
                retry: Duration::from_secs(retry_secs),
                url_for_logs,
                health: Mutex::new(Health::default()),
                fallbacks: AtomicU64::new(0),
                outages_ended: AtomicU64::new(0),
            }),
        })
    }

    /// The URL without its password, for logs.
    pub(crate) fn url_for_logs(&self) -> &str {
        &self.inner.url_for_logs
    }

    /// Runs `invocation` (one script, EVALSHA with a fallback to EVAL) within the timeout;
    /// `None` when Redis is inside its back-off or the call failed (the failure is recorded).
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Option<T> {
        if !self.should_try() {
            return None;
        }
        let mut conn = self.inner.manager.clone();
        let call = invocation.invoke_async::<T>(&mut conn);
        let result = match tokio::time::timeout(self.inner.timeout, call).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", self.inner.timeout.as_millis())),
        };
        match result {
            Ok(reply) => {
                self.record_success();
                Some(reply)
            }
            Err(error) => {
                self.record_failure(&error);
                None
            }
        }
    }

    /// Runs `pipeline` within the timeout; `false` when Redis is unavailable.
    pub(crate) async fn run(&self, pipeline: &redis::Pipeline) -> bool {
        if !self.should_try() {
            return false;
        }
        let mut conn = self.inner.manager.clone();
        let call = pipeline.query_async::<()>(&mut conn);
        match tokio::time::timeout(self.inner.timeout, call).await {
            Ok(Ok(())) => {
                self.record_success();
                true
            }
            Ok(Err(e)) => {
                self.record_failure(&e.to_string());
                false
            }
            Err(_) => {
                self.record_failure("no answer in time");
                false
            }
        }
    }

    /// Whether Redis should be tried now (not inside the back-off after a failure).
    fn should_try(&self) -> bool {
        match self.inner.health.lock() {
            Ok(h) => h.down_until.is_none_or(|until| Instant::now() >= until),
            Err(_) => true,
        }
    }

    /// Whether Redis is inside its back-off after a failure (not tried until it ends).
    pub(crate) fn in_backoff(&self) -> bool {
        !self.should_try()
    }

    /// Whether the last call to Redis succeeded (true before the first).
    pub fn available(&self) -> bool {
        self.inner.health.lock().map_or(true, |h| !h.failing)
    }

    /// Counts one call decided without Redis (by memory or the database).
    pub(crate) fn count_fallback(&self) {
        self.inner.fallbacks.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls decided without Redis because it was unavailable, since start.
    pub fn fallbacks(&self) -> u64 {
        self.inner.fallbacks.load(Ordering::Relaxed)
    }

    /// Outages that ended (a successful call after failed ones), since start.
    pub(crate) fn outages_ended(&self) -> u64 {
        self.inner.outages_ended.load(Ordering::Relaxed)
    }

    fn record_success(&self) {
        let Ok(mut h) = self.inner.health.lock() else {
            return;
        };
        if h.failing {
            self.inner.outages_ended.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                redis = %self.inner.url_for_logs,
                "Redis reachable again: rate limits and key counters are shared across nodes again"
            );
        }
        *h = Health::default();
    }

    fn record_failure(&self, error: &str) {
        let Ok(mut h) = self.inner.health.lock() else {
            return;
        };
        let now = Instant::now();
        h.down_until = Some(now + self.inner.retry);
        let first = !h.failing;
        h.failing = true;
        if first || h.last_logged.is_none_or(|t| now.duration_since(t) >= LOG_EVERY) {
            tracing::warn!(
                redis = %self.inner.url_for_logs,
                %error,
                failures_since_last_log = h.unlogged,
                retry_in_secs = self.inner.retry.as_secs(),
                "Redis unreachable: rate limits fall back to this node's memory, key counters \
                 (gateway.key_counters = \"redis\") to the database"
            );
            h.last_logged = Some(now);
            h.unlogged = 0;
        } else {
            h.unlogged += 1;
        }
    }

    /// `PING` within the timeout.
    pub(crate) async fn ping(&self) -> bool {
        let mut conn = self.inner.manager.clone();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<String>(&mut conn);
        matches!(tokio::time::timeout(self.inner.timeout, ping).await, Ok(Ok(_)))
    }
}
