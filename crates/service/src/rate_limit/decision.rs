//! What counting one request answers ([`Decision`]).

use super::config::PolicyQuota;
use super::policy::Policy;
use crate::error::ServiceError;
use std::time::Duration;

/// The outcome of counting one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The policy that decided.
    pub policy: Policy,
    /// Whether the request may proceed.
    pub allowed: bool,
    /// The policy's `limit` (requests per window).
    pub limit: u32,
    /// The policy's window in seconds.
    pub window_secs: u64,
    /// Requests that may still be made right now (0 when refused).
    pub remaining: u32,
    /// How long until a request passes again (zero while `remaining > 0` or allowed).
    pub retry_after: Duration,
    /// How long until the whole quota is available again.
    pub reset_after: Duration,
}

fn ceil_secs(d: Duration) -> u64 {
    let secs = d.as_secs();
    if d.subsec_nanos() > 0 {
        secs.saturating_add(1)
    } else {
        secs
    }
}

impl Decision {
    /// A refusal by `policy` (quota `p`) for `wait` more.
    pub fn refused(policy: Policy, p: PolicyQuota, wait: Duration) -> Self {
        let interval = Duration::from_secs(p.window_secs) / p.limit.max(1);
        Self {
            policy,
            allowed: false,
            limit: p.limit,
            window_secs: p.window_secs,
            remaining: 0,
            retry_after: wait,
            reset_after: wait + interval * p.limit.saturating_sub(1),
        }
    }

    /// `Retry-After` in whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3).
    pub fn retry_after_secs(&self) -> u64 {
        ceil_secs(self.retry_after).max(1)
    }

    /// Seconds until the quota resets, rounded up: until the next request passes when
    /// refused, until the whole quota is back when allowed (the `t` of the `RateLimit` field).
    pub fn reset_secs(&self) -> u64 {
        if self.allowed {
            ceil_secs(self.reset_after)
        } else {
            self.retry_after_secs()
        }
    }

    /// The request may proceed, or [`ServiceError::RateLimited`] with `reset` as Unix seconds
    /// from `now_unix_secs`.
    ///
    /// # Errors
    /// [`ServiceError::RateLimited`] when the request is refused.
    pub fn into_result(self, now_unix_secs: i64) -> Result<Self, ServiceError> {
        if self.allowed {
            return Ok(self);
        }
        let retry_after_secs = self.retry_after_secs();
        Err(ServiceError::RateLimited {
            limit: self.limit,
            remaining: 0,
            reset: now_unix_secs
                .saturating_add(i64::try_from(retry_after_secs).unwrap_or(i64::MAX)),
            retry_after_secs,
            scope: None,
        })
    }
}
