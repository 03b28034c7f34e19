//! The node's connection to Redis (`rate_limit.redis_url`, or the master that
//! `rate_limit.redis_sentinels` name), shared by the named rate-limit policies
//! (`rate_limit.backend = "redis"`) and keys' counters (`gateway.key_counters = "redis"`): one
//! connection manager, one health state, one count of fallbacks.
//!
//! Failure handling: each call waits at most `redis_timeout_ms`. A failure (refused
//! connection, timeout, script error, a demoted master's `READONLY`) is logged - at most once
//! a minute, with the number of failures in between - and the caller falls back (the named
//! policies to the node's memory limiter, keys' counters to the database). For the next
//! `redis_retry_secs` Redis is not tried at all (no request pays the timeout); then one call
//! tries again, and on success the node is back on Redis and says so in the log.
//!
//! With Sentinels the first call, and the first call after any failure, asks them for the
//! master ([`SentinelTarget`]), within twice `redis_timeout_ms`; the calls that arrive
//! meanwhile wait for that answer. The connection carries the master's replication id
//! ([`RedisConn::epoch`]), which changes when a replica is promoted.

use crate::error::ServiceError;
use crate::redis_sentinel::{replication_id, SentinelTarget};
use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Log a Redis failure at most this often.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Where the node's Redis is: `rate_limit.redis_url`, and the Sentinels that name its master
/// when `sentinels` is not empty (then the URL gives only the password, user and database).
#[derive(Debug, Clone, Copy)]
pub struct RedisEndpoint<'a> {
    /// `rate_limit.redis_url`.
    pub url: &'a str,
    /// `rate_limit.redis_sentinels`: `host:port` or `redis://[:password@]host:port` each.
    pub sentinels: &'a [String],
    /// `rate_limit.redis_sentinel_master`: the master's name in the Sentinels' configuration.
    pub sentinel_master: &'a str,
}

impl RedisEndpoint<'_> {
    /// The Sentinels as URLs: `host:port` becomes `redis://host:port`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        let url = |s: &String| if s.contains("://") { s.clone() } else { format!("redis://{s}") };
        self.sentinels.iter().map(url).collect()
    }

    /// The Sentinels without their passwords, for logs and `Debug`.
    pub fn sentinels_for_logs(&self) -> Vec<String> {
        self.sentinel_urls().iter().map(|s| aigw_domain::redact::redact_url(s)).collect()
    }
}

#[derive(Debug, Default)]
struct Health {
    /// Redis is not tried before this instant.
    down_until: Option<Instant>,
    /// Whether the last attempt failed.
    failing: bool,
    /// When the first failure of the current outage was seen.
    failing_since: Option<Instant>,
    /// When a failure was last logged.
    last_logged: Option<Instant>,
    /// Failures not logged since then.
    unlogged: u64,
}

/// One server's connection: the URL's, or the master's the Sentinels named.
struct Connected {
    manager: ConnectionManager,
    /// The master's replication id (with Sentinels only).
    epoch: Option<Arc<str>>,
}

struct Inner {
    /// The connection calls use now (always set without Sentinels).
    current: ArcSwapOption<Connected>,
    /// With Sentinels: how to find the master, and whether to find it again before the next
    /// call (after a failure: the master may have changed).
    sentinel: Option<(SentinelTarget, AtomicBool)>,
    /// One resolution through the Sentinels at a time.
    resolving: tokio::sync::Mutex<()>,
    manager_config: ConnectionManagerConfig,
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

/// The connection one call uses, and whose data it holds ([`RedisConn::epoch`]): the keys a
/// call names and the server it sends them to come from the same resolution.
pub(crate) struct RedisConn {
    link: RedisLink,
    connected: Arc<Connected>,
}

impl std::fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLink").field("url", &self.inner.url_for_logs).finish_non_exhaustive()
    }
}

impl RedisLink {
    /// A link to `endpoint` whose every command gives up after `timeout_ms` milliseconds (at
    /// least 1), and which is not tried again for `retry_secs` seconds after a failure.
    /// Nothing connects before the first call, so a node starts even while Redis is down.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] naming `rate_limit.redis_url` or
    /// `rate_limit.redis_sentinels` when it cannot be parsed.
    pub fn new(
        endpoint: RedisEndpoint<'_>,
        timeout_ms: u64,
        retry_secs: u64,
    ) -> Result<Self, ServiceError> {
        let timeout = Duration::from_millis(timeout_ms.max(1));
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let (current, sentinel, url_for_logs) = if endpoint.sentinels.is_empty() {
            let url_for_logs = aigw_domain::redact::redact_url(endpoint.url);
            let client = redis::Client::open(endpoint.url).map_err(|e| {
                ServiceError::Internal(format!("rate_limit.redis_url {url_for_logs}: {e}"))
            })?;
            let manager = ConnectionManager::new_lazy_with_config(client, manager_config.clone())
                .map_err(|e| {
                ServiceError::Internal(format!("Redis connection manager: {e}"))
            })?;
            (Some(Arc::new(Connected { manager, epoch: None })), None, url_for_logs)
        } else {
            let target = SentinelTarget::new(
                &endpoint.sentinel_urls(),
                endpoint.sentinel_master,
                endpoint.url,
            )
            .map_err(ServiceError::Internal)?;
            let for_logs = format!(
                "master {:?} of Sentinels {}",
                endpoint.sentinel_master,
                endpoint.sentinels_for_logs().join(",")
            );
            (None, Some((target, AtomicBool::new(true))), for_logs)
        };
        Ok(Self {
            inner: Arc::new(Inner {
                current: ArcSwapOption::new(current),
                sentinel,
                resolving: tokio::sync::Mutex::new(()),
                manager_config,
                timeout,
                retry: Duration::from_secs(retry_secs),
                url_for_logs,
                health: Mutex::new(Health::default()),
                fallbacks: AtomicU64::new(0),
                outages_ended: AtomicU64::new(0),
            }),
        })
    }

    /// The URL without its password (or the Sentinels and master name), for logs.
    pub(crate) fn url_for_logs(&self) -> &str {
        &self.inner.url_for_logs
    }

    /// The connection to use now: `None` when Redis is inside its back-off, or the Sentinels
    /// named no master that answered (the failure is recorded).
    pub(crate) async fn connect(&self) -> Option<RedisConn> {
        if !self.should_try() {
            return None;
        }
        if let Some(conn) = self.usable() {
            return Some(conn);
        }
        let (target, stale) = self.inner.sentinel.as_ref()?;
        let _one_at_a_time = self.inner.resolving.lock().await;
        if let Some(conn) = self.usable() {
            return Some(conn);
        }
        if !self.should_try() {
            return None;
        }
        let bound = self.inner.timeout.saturating_mul(2);
        // Boxed: the Sentinel client's futures are deep, and this path is cold.
        let find = Box::pin(self.find_master(target));
        let found = match tokio::time::timeout(bound, find).await {
            Ok(found) => found,
            Err(_) => Err(format!("no master found within {} ms", bound.as_millis())),
        };
        match found {
            Ok(connected) => {
                let connected = Arc::new(connected);
                self.inner.current.store(Some(connected.clone()));
                stale.store(false, Ordering::Release);
                Some(RedisConn { link: self.clone(), connected })
            }
            Err(error) => {
                self.record_failure(&error);
                None
            }
        }
    }

    /// The current connection unless the Sentinels must be asked again.
    fn usable(&self) -> Option<RedisConn> {
        let stale = self.inner.sentinel.as_ref().is_some_and(|(_, s)| s.load(Ordering::Acquire));
        let connected = self.inner.current.load_full().filter(|_| !stale)?;
        Some(RedisConn { link: self.clone(), connected })
    }

    /// Asks the Sentinels for the master, connects to it and reads its replication id; logs
    /// when the master is another than before.
    async fn find_master(&self, target: &SentinelTarget) -> Result<Connected, String> {
        let (client, address) = target.master().await?;
        let mut manager =
            ConnectionManager::new_with_config(client, self.inner.manager_config.clone())
                .await
                .map_err(|e| format!("master {address}: {e}"))?;
        let epoch: Arc<str> = replication_id(&mut manager).await?.into();
        let before = self.inner.current.load_full().and_then(|c| c.epoch.clone());
        match before {
            None => tracing::info!(
                master = %address,
                replication_id = %epoch,
                name = target.master_name(),
                "Redis master found through Sentinel"
            ),
            Some(before) if *before != *epoch => tracing::warn!(
                master = %address,
                replication_id = %epoch,
                before = %before,
                name = target.master_name(),
                "Redis master changed (failover): keys' budget counters reopen from the ledger \
                 under the new master's replication id"
            ),
            Some(_) => {}
        }
        Ok(Connected { manager, epoch: Some(epoch) })
    }

    /// Runs `invocation` (one script, EVALSHA with a fallback to EVAL) within the timeout;
    /// `None` when Redis is inside its back-off or the call failed (the failure is recorded).
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Option<T> {
        self.connect().await?.invoke(invocation).await
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

    /// When this node saw the current outage begin (`None` while Redis answers).
    pub(crate) fn failing_since(&self) -> Option<Instant> {
        self.inner.health.lock().ok().and_then(|h| h.failing_since)
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
        if let Some((_, stale)) = &self.inner.sentinel {
            // The master may have changed: ask the Sentinels again before the next call.
            stale.store(true, Ordering::Release);
        }
        let Ok(mut h) = self.inner.health.lock() else {
            return;
        };
        let now = Instant::now();
        h.down_until = Some(now + self.inner.retry);
        let first = !h.failing;
        h.failing = true;
        if first {
            h.failing_since = Some(now);
        }
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

    /// `PING` within the timeout, on the current connection (with Sentinels, the last master
    /// found, or a new one when there is none yet).
    pub(crate) async fn ping(&self) -> bool {
        let connected = match self.inner.current.load_full() {
            Some(connected) => connected,
            None => match self.connect().await {
                Some(conn) => conn.connected,
                None => return false,
            },
        };
        let mut manager = connected.manager.clone();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<String>(&mut manager);
        matches!(tokio::time::timeout(self.inner.timeout, ping).await, Ok(Ok(_)))
    }
}

impl RedisConn {
    /// The master's replication id when the Sentinels named it (`None` without Sentinels):
    /// another id means another master, whose copy of the data may lack the last writes.
    pub(crate) fn epoch(&self) -> Option<&str> {
        self.connected.epoch.as_deref()
    }

    /// Runs `invocation` (one script, EVALSHA with a fallback to EVAL) within the timeout;
    /// `None` when the call failed (the failure is recorded on the link).
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Option<T> {
        let mut manager = self.connected.manager.clone();
        self.finish(invocation.invoke_async::<T>(&mut manager)).await
    }

    /// Runs one command within the timeout; `None` when it failed (recorded).
    pub(crate) async fn query<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Option<T> {
        let mut manager = self.connected.manager.clone();
        self.finish(command.query_async::<T>(&mut manager)).await
    }

    /// Runs `pipeline` within the timeout; `false` when the call failed (recorded).
    pub(crate) async fn run(&self, pipeline: &redis::Pipeline) -> bool {
        let mut manager = self.connected.manager.clone();
        self.finish(pipeline.query_async::<()>(&mut manager)).await.is_some()
    }

    /// Waits for `call` within the link's timeout and records its success or failure.
    async fn finish<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Option<T> {
        let timeout = self.link.inner.timeout;
        let result = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
        };
        match result {
            Ok(reply) => {
                self.link.record_success();
                Some(reply)
            }
            Err(error) => {
                self.link.record_failure(&error);
                None
            }
        }
    }
}
