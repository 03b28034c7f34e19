//! The shared backend: GCRA in Redis, one atomic Lua script per check, so every node counts
//! against the same quota. Time comes from Redis (`TIME`), so the nodes' clocks do not matter.
//!
//! Failure handling: each check waits at most `redis_timeout_ms`. A failure (refused
//! connection, timeout, script error) is logged - at most once a minute, with the number of
//! failures in between - and the caller falls back to the node's memory limiter. For the next
//! `redis_retry_secs` Redis is not tried at all (no request pays the timeout); then one check
//! tries again, and on success the node is back on Redis and says so in the log.

use super::{Decision, LimitKey, Policy, PolicyQuota, RateLimitConfig};
use crate::error::ServiceError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// GCRA over milliseconds. KEYS[1]: the key. ARGV[1]: limit (the burst). ARGV[2]: window in
/// milliseconds. The key holds the theoretical arrival time (TAT) and expires when the quota
/// is full again. Returns {allowed (0/1), remaining, retry_after_ms, reset_after_ms}.
const GCRA: &str = r"
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local interval = window / limit
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tat = tonumber(redis.call('GET', KEYS[1]) or 0) or 0
if tat < now then tat = now end
local new_tat = tat + interval
if new_tat - now > window + 0.001 then
  return {0, 0, math.ceil(new_tat - window - now), math.ceil(tat - now)}
end
local ttl = math.ceil(new_tat - now)
redis.call('SET', KEYS[1], string.format('%.3f', new_tat), 'PX', ttl)
local remaining = math.floor((window - (new_tat - now)) / interval + 0.000001)
return {1, remaining, 0, ttl}
";

/// The GCRA of [`GCRA`] without counting: {refused (0/1), retry_after_ms}.
const GCRA_PEEK: &str = r"
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local interval = window / limit
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tat = tonumber(redis.call('GET', KEYS[1]) or 0) or 0
if tat < now then tat = now end
local new_tat = tat + interval
if new_tat - now > window + 0.001 then
  return {1, math.ceil(new_tat - window - now)}
end
return {0, 0}
";

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

pub(crate) struct RedisLimiter {
    manager: ConnectionManager,
    script: redis::Script,
    peek_script: redis::Script,
    prefix: String,
    timeout: Duration,
    retry: Duration,
    url_for_logs: String,
    health: Mutex<Health>,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("url", &self.url_for_logs)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// `redis://user:secret@host:6379/0` without the password, for logs.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

impl RedisLimiter {
    pub(crate) fn new(config: &RateLimitConfig) -> Result<Self, ServiceError> {
        let url_for_logs = redacted(&config.redis_url);
        let client = redis::Client::open(config.redis_url.as_str()).map_err(|e| {
            ServiceError::Internal(format!("rate_limit.redis_url {url_for_logs}: {e}"))
        })?;
        let timeout = Duration::from_millis(config.redis_timeout_ms.max(1));
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_lazy_with_config(client, manager_config)
            .map_err(|e| ServiceError::Internal(format!("Redis connection manager: {e}")))?;
        tracing::info!(redis = %url_for_logs, "rate limits shared through Redis");
        Ok(Self {
            manager,
            script: redis::Script::new(GCRA),
            peek_script: redis::Script::new(GCRA_PEEK),
            prefix: config.redis_key_prefix.clone(),
            timeout,
            retry: Duration::from_secs(config.redis_retry_secs),
            url_for_logs,
            health: Mutex::new(Health::default()),
        })
    }

    /// Whether Redis should be tried now (not inside the back-off after a failure).
    fn should_try(&self) -> bool {
        match self.health.lock() {
            Ok(h) => h.down_until.is_none_or(|until| Instant::now() >= until),
            Err(_) => true,
        }
    }

    /// Whether the last call to Redis succeeded (true before the first).
    pub(crate) fn available(&self) -> bool {
        self.health.lock().map_or(true, |h| !h.failing)
    }

    fn record_success(&self) {
        let Ok(mut h) = self.health.lock() else {
            return;
        };
        if h.failing {
            tracing::info!(
                redis = %self.url_for_logs,
                "Redis reachable again: rate limits are shared across nodes again"
            );
        }
        *h = Health::default();
    }

    fn record_failure(&self, error: &str) {
        let Ok(mut h) = self.health.lock() else {
            return;
        };
        let now = Instant::now();
        h.down_until = Some(now + self.retry);
        let first = !h.failing;
        h.failing = true;
        if first || h.last_logged.is_none_or(|t| now.duration_since(t) >= LOG_EVERY) {
            tracing::warn!(
                redis = %self.url_for_logs,
                %error,
                failures_since_last_log = h.unlogged,
                retry_in_secs = self.retry.as_secs(),
                "Redis unreachable: rate limits fall back to this node's memory"
            );
            h.last_logged = Some(now);
            h.unlogged = 0;
        } else {
            h.unlogged += 1;
        }
    }

    /// Counts one request in Redis; `None` when Redis is not available (the caller then asks
    /// the memory limiter).
    pub(crate) async fn check(
        &self,
        policy: Policy,
        p: PolicyQuota,
        key: &LimitKey,
    ) -> Option<Decision> {
        if !self.should_try() {
            return None;
        }
        let redis_key = format!("{}{}:{}", self.prefix, policy.name(), key.to_hex());
        let window_ms = p.window_secs.saturating_mul(1000);
        let mut conn = self.manager.clone();
        let mut invocation = self.script.key(redis_key);
        invocation.arg(p.limit).arg(window_ms);
        let call = invocation.invoke_async::<(i64, i64, i64, i64)>(&mut conn);
        let result = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        };
        match result {
            Ok((allowed, remaining, retry_after_ms, reset_after_ms)) => {
                self.record_success();
                let ms = |v: i64| Duration::from_millis(u64::try_from(v).unwrap_or(0));
                Some(Decision {
                    policy,
                    allowed: allowed == 1,
                    limit: p.limit,
                    window_secs: p.window_secs,
                    remaining: u32::try_from(remaining).unwrap_or(0).min(p.limit),
                    retry_after: ms(retry_after_ms),
                    reset_after: ms(reset_after_ms),
                })
            }
            Err(error) => {
                self.record_failure(&error);
                None
            }
        }
    }

    /// Whether `key` would be refused now, without counting: `Some(Some(refusal))` or
    /// `Some(None)` (allowed); `None` when Redis is not available.
    pub(crate) async fn peek(
        &self,
        policy: Policy,
        p: PolicyQuota,
        key: &LimitKey,
    ) -> Option<Option<Decision>> {
        if !self.should_try() {
            return None;
        }
        let redis_key = format!("{}{}:{}", self.prefix, policy.name(), key.to_hex());
        let mut conn = self.manager.clone();
        let mut invocation = self.peek_script.key(redis_key);
        invocation.arg(p.limit).arg(p.window_secs.saturating_mul(1000));
        let call = invocation.invoke_async::<(i64, i64)>(&mut conn);
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok((refused, retry_after_ms))) => {
                self.record_success();
                let wait = Duration::from_millis(u64::try_from(retry_after_ms).unwrap_or(0));
                Some((refused == 1).then_some(Decision::refused(policy, p, wait)))
            }
            Ok(Err(e)) => {
                self.record_failure(&e.to_string());
                None
            }
            Err(_) => {
                self.record_failure("no answer in time");
                None
            }
        }
    }

    /// `PING` within the timeout.
    pub(crate) async fn ping(&self) -> bool {
        let mut conn = self.manager.clone();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<String>(&mut conn);
        matches!(tokio::time::timeout(self.timeout, ping).await, Ok(Ok(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn urls_are_logged_without_password() {
        assert_eq!(redacted("redis://:hunter2@cache:6379/0"), "redis://***@cache:6379/0");
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
