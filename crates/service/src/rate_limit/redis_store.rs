//! The shared backend: GCRA in Redis, one atomic Lua script per check, so every node counts
//! against the same quota. Time comes from Redis (`TIME`), so the nodes' clocks do not matter.
//!
//! Failure handling ([`RedisLink`]): each check waits at most `redis_timeout_ms`; on a failure
//! the caller falls back to the node's memory limiter, and Redis is not tried again for
//! `redis_retry_secs`.

use super::{Decision, LimitKey, Policy, PolicyQuota, RateLimitConfig};
use crate::redis_link::RedisLink;
use std::time::Duration;

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

pub(crate) struct RedisLimiter {
    link: RedisLink,
    script: redis::Script,
    peek_script: redis::Script,
    prefix: String,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("url", &self.link.url_for_logs())
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// The policies' counters in Redis over `link`.
    pub(crate) fn new(config: &RateLimitConfig, link: RedisLink) -> Self {
        tracing::info!(redis = %link.url_for_logs(), "rate limits shared through Redis");
        Self {
            link,
            script: redis::Script::new(GCRA),
            peek_script: redis::Script::new(GCRA_PEEK),
            prefix: config.redis_key_prefix.clone(),
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
        let redis_key = format!("{}{}:{}", self.prefix, policy.name(), key.to_hex());
        let window_ms = p.window_secs.saturating_mul(1000);
        let mut invocation = self.script.key(redis_key);
        invocation.arg(p.limit).arg(window_ms);
        let (allowed, remaining, retry_after_ms, reset_after_ms) =
            self.link.invoke::<(i64, i64, i64, i64)>(&invocation).await?;
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

    /// Whether `key` would be refused now, without counting: `Some(Some(refusal))` or
    /// `Some(None)` (allowed); `None` when Redis is not available.
    pub(crate) async fn peek(
        &self,
        policy: Policy,
        p: PolicyQuota,
        key: &LimitKey,
    ) -> Option<Option<Decision>> {
        let redis_key = format!("{}{}:{}", self.prefix, policy.name(), key.to_hex());
        let mut invocation = self.peek_script.key(redis_key);
        invocation.arg(p.limit).arg(p.window_secs.saturating_mul(1000));
        let (refused, retry_after_ms) = self.link.invoke::<(i64, i64)>(&invocation).await?;
        let wait = Duration::from_millis(u64::try_from(retry_after_ms).unwrap_or(0));
        Some((refused == 1).then_some(Decision::refused(policy, p, wait)))
    }
}
