//! Request rate limits (429 `rate_limit_exceeded` with `limit`, `remaining`, `reset`): the named
//! policies that count requests per client address, per account or per credential on each
//! route. What a gateway call may spend (budgets, rpm and tpm of keys, members and teams) is
//! the other limiting part, `crate::governance`.
//!
//! A [`RateLimiter`] holds one GCRA limiter per [`Policy`]; [`RateLimiter::check`] counts one
//! request against a [`LimitKey`] and answers a [`Decision`]. Counters live in the process
//! (`governor`) or in Redis (one atomic Lua script per check, shared by every node). When Redis
//! cannot be reached the node logs it, decides with its own memory limiter and tries Redis
//! again after `redis_retry_secs`, so an outage of Redis never turns into 5xx answers.
//!
//! Keys are SHA-256 digests (truncated to 128 bits) of what identifies the caller, so neither
//! memory nor Redis holds e-mail addresses or IPs in clear, and a long e-mail costs no more
//! memory than a short one.

pub mod config;
mod decision;
mod memory;
mod policy;
mod redis_store;

pub use config::{
    ForwardedHeader, Policies, PolicyConfig, PolicyQuota, RateLimitBackend, RateLimitConfig,
};

pub use decision::Decision;
pub use policy::{LimitKey, Policy, POLICY_COUNT};

use crate::error::ServiceError;
use crate::redis_link::RedisLink;
use memory::MemoryLimiter;
use redis_store::RedisLimiter;
use std::sync::Arc;

/// The limits of every policy, or nothing when rate limiting is off. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    inner: Option<Arc<Inner>>,
    /// The node's Redis connection, when the policies or keys' counters use it: its health
    /// and fallbacks are what `/metrics` and `/readyz` report.
    redis: Option<RedisLink>,
}

#[derive(Debug)]
struct Inner {
    policies: [PolicyQuota; POLICY_COUNT],
    memory: MemoryLimiter,
    redis: Option<RedisLimiter>,
}

impl RateLimiter {
    /// Builds the limiters of `config`. The Redis connection is opened lazily, on the first
    /// check, so a node starts even while Redis is down. Call from within a tokio runtime
    /// (a background task trims idle memory keys every minute).
    ///
    /// # Errors
    /// [`ServiceError::Internal`] naming the setting when a policy has `limit = 0` or
    /// `window_secs = 0`, or `redis_url` or `redis_sentinels` cannot be parsed.
    pub fn new(config: &RateLimitConfig) -> Result<Self, ServiceError> {
        if !config.enabled {
            return Ok(Self::disabled());
        }
        let mut policies = [PolicyQuota { enabled: false, limit: 1, window_secs: 1 }; POLICY_COUNT];
        for policy in Policy::ALL {
            let p = config.policies.get(policy);
            if p.limit == 0 || p.window_secs == 0 {
                return Err(ServiceError::Internal(format!(
                    "rate_limit.policies.{}: limit and window_secs must be at least 1",
                    policy.name()
                )));
            }
            policies[policy.index()] = p;
        }
        let memory = MemoryLimiter::new(&policies)?;
        let link = match config.backend {
            RateLimitBackend::Memory => None,
            RateLimitBackend::Redis => Some(RedisLink::new(
                config.redis_endpoint(),
                config.redis_timeout_ms,
                config.redis_retry_secs,
            )?),
        };
        let redis = link.clone().map(|link| RedisLimiter::new(config, link));
        Ok(Self { inner: Some(Arc::new(Inner { policies, memory, redis })), redis: link })
    }

    /// A limiter that allows everything (`enabled = false`).
    pub fn disabled() -> Self {
        Self { inner: None, redis: None }
    }

    /// The node's Redis connection for keys' counters (`gateway.key_counters = "redis"`):
    /// the policies' own when they count in Redis, else a new one to `config.redis_url`, whose
    /// health and fallbacks this limiter then reports.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when `redis_url` or `redis_sentinels` cannot be parsed.
    pub fn share_redis(&mut self, config: &RateLimitConfig) -> Result<RedisLink, ServiceError> {
        if let Some(link) = &self.redis {
            return Ok(link.clone());
        }
        let link = RedisLink::new(
            config.redis_endpoint(),
            config.redis_timeout_ms,
            config.redis_retry_secs,
        )?;
        self.redis = Some(link.clone());
        Ok(link)
    }

    /// The quota of `policy`, or `None` when it is off.
    pub fn policy(&self, policy: Policy) -> Option<PolicyQuota> {
        let inner = self.inner.as_ref()?;
        let p = inner.policies[policy.index()];
        p.enabled.then_some(p)
    }

    /// Counts one request of `key` against `policy`. `None` when the policy is off.
    /// Never fails: a Redis failure is logged and the node's memory limiter decides.
    pub async fn check(&self, policy: Policy, key: &LimitKey) -> Option<Decision> {
        let inner = self.inner.as_ref()?;
        let quota = inner.policies[policy.index()];
        if !quota.enabled {
            return None;
        }
        if let Some(redis) = &inner.redis {
            if let Some(decision) = redis.check(policy, quota, key).await {
                return Some(decision);
            }
            if let Some(link) = &self.redis {
                link.count_fallback();
            }
        }
        Some(inner.memory.check(policy, quota, key))
    }

    /// Whether `key` is refused by `policy` right now, *without* counting a request: `Some`
    /// (a refusal) while the last counted request of `key` was refused and its
    /// `Retry-After` has not passed. `None` when allowed or the policy is off.
    pub async fn peek_refused(&self, policy: Policy, key: &LimitKey) -> Option<Decision> {
        let inner = self.inner.as_ref()?;
        let quota = inner.policies[policy.index()];
        if !quota.enabled {
            return None;
        }
        if let Some(redis) = &inner.redis {
            if let Some(refused) = redis.peek(policy, quota, key).await {
                return refused;
            }
        }
        inner.memory.peek_refused(policy, quota, key)
    }

    /// Whether counters are kept in Redis (`backend = "redis"` and rate limiting on, or keys'
    /// counters in Redis).
    pub fn uses_redis(&self) -> bool {
        self.redis.is_some()
    }

    /// Calls decided without Redis because it was unavailable, since start (a counter for
    /// `/metrics`): rate-limit checks decided by this node's memory, and admissions of keys'
    /// counters decided by the database (`gateway.key_counters = "redis"`).
    pub fn memory_fallbacks(&self) -> u64 {
        self.redis.as_ref().map_or(0, RedisLink::fallbacks)
    }

    /// Whether the last call to Redis succeeded (`None` when nothing uses Redis), without
    /// calling it: a gauge for `/metrics`.
    pub fn redis_available(&self) -> Option<bool> {
        self.redis.as_ref().map(RedisLink::available)
    }

    /// Whether the node's Redis answers a `PING` (always `true` when nothing uses Redis), for
    /// readiness probes.
    pub async fn redis_ready(&self) -> bool {
        match &self.redis {
            Some(redis) => redis.ping().await,
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::net::IpAddr;
    use std::time::Duration;

    fn config(limit: u32, window_secs: u64) -> RateLimitConfig {
        let mut c = RateLimitConfig::default();
        c.policies.login = PolicyConfig::new(limit, window_secs);
        c
    }

    #[tokio::test]
    async fn memory_limit_trips_after_exactly_limit_requests() {
        let limiter = RateLimiter::new(&config(3, 60)).unwrap();
        let key = LimitKey::login("192.0.2.1".parse().unwrap(), "a@example.com");
        for expected in [2, 1, 0] {
            let d = limiter.check(Policy::Login, &key).await.unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, expected);
            assert_eq!(d.limit, 3);
        }
        let d = limiter.check(Policy::Login, &key).await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        // One request's worth comes back every 20 s.
        assert!(d.retry_after <= Duration::from_secs(20), "{d:?}");
        assert!(d.retry_after > Duration::from_secs(19), "{d:?}");
        assert_eq!(d.retry_after_secs(), 20);
        let other = LimitKey::login("192.0.2.1".parse().unwrap(), "b@example.com");
        assert!(limiter.check(Policy::Login, &other).await.unwrap().allowed);
    }

    #[tokio::test]
    async fn disabled_limiter_decides_nothing() {
        let mut c = config(1, 60);
        c.enabled = false;
        let limiter = RateLimiter::new(&c).unwrap();
        let key = LimitKey::client_ip("192.0.2.1".parse().unwrap());
        assert!(limiter.check(Policy::Login, &key).await.is_none());
        let mut c = config(1, 60);
        c.policies.login = PolicyConfig::off();
        let limiter = RateLimiter::new(&c).unwrap();
        assert!(limiter.check(Policy::Login, &key).await.is_none());
        assert!(limiter.check(Policy::Register, &key).await.is_some());
    }

    #[test]
    fn zero_limits_are_refused() {
        assert!(RateLimiter::new(&config(0, 60)).is_err());
        assert!(RateLimiter::new(&config(1, 0)).is_err());
    }

    #[test]
    fn keys_normalise_email_and_ipv6_prefix() {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(LimitKey::login(ip, " A@Example.com "), LimitKey::login(ip, "a@example.com"));
        assert_eq!(
            LimitKey::client_ip("2001:db8::1".parse().unwrap()),
            LimitKey::client_ip("2001:db8::ffff:1".parse().unwrap())
        );
        assert_ne!(
            LimitKey::client_ip("2001:db8::1".parse().unwrap()),
            LimitKey::client_ip("2001:db8:0:1::1".parse().unwrap())
        );
        assert_eq!(
            LimitKey::client_ip("::ffff:192.0.2.1".parse().unwrap()),
            LimitKey::client_ip(ip)
        );
    }

    #[test]
    fn refused_decision_maps_to_429_fields() {
        let d = Decision {
            policy: Policy::Login,
            allowed: false,
            limit: 10,
            window_secs: 60,
            remaining: 0,
            retry_after: Duration::from_millis(5_200),
            reset_after: Duration::from_secs(59),
        };
        match d.into_result(1_000) {
            Err(ServiceError::RateLimited {
                limit, remaining, reset, retry_after_secs, ..
            }) => {
                assert_eq!((limit, remaining, reset, retry_after_secs), (10, 0, 1_006, 6));
            }
            other => panic!("{other:?}"),
        }
    }
}
