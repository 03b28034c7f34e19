//! The in-process backend: one keyed `governor` GCRA limiter per policy. Idle keys (whose
//! quota is full again) are dropped every minute by a background task, so memory is bounded
//! by the number of keys active within one window.

use super::{Decision, LimitKey, Policy, PolicyQuota};
use crate::error::ServiceError;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::Quota;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

type Keyed = governor::RateLimiter<
    [u8; 16],
    DefaultKeyedStateStore<[u8; 16]>,
    DefaultClock,
    StateInformationMiddleware,
>;

/// Until when each (policy index, key) stays refused.
type Refused = Mutex<HashMap<(usize, [u8; 16]), Instant>>;

/// How often idle keys are dropped.
const RETAIN_EVERY: Duration = Duration::from_secs(60);

/// One limiter per policy, indexed like `Policy::index`.
pub(crate) struct MemoryLimiter {
    limiters: Arc<Vec<Keyed>>,
    /// Until when each refused key stays refused (for [`MemoryLimiter::peek_refused`]).
    refused: Arc<Refused>,
}

impl std::fmt::Debug for MemoryLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<usize> = self.limiters.iter().map(Keyed::len).collect();
        f.debug_struct("MemoryLimiter").field("keys", &keys).finish()
    }
}

/// The GCRA quota of a policy: a burst of `limit`, one request back every `window / limit`.
fn quota(p: PolicyQuota) -> Result<Quota, ServiceError> {
    let burst = NonZeroU32::new(p.limit)
        .ok_or_else(|| ServiceError::Internal("rate limit of 0".to_owned()))?;
    let period = Duration::from_secs(p.window_secs) / p.limit;
    Quota::with_period(period)
        .map(|q| q.allow_burst(burst))
        .ok_or_else(|| ServiceError::Internal("rate-limit window too short".to_owned()))
}

impl MemoryLimiter {
    pub(crate) fn new(policies: &[PolicyQuota; super::POLICY_COUNT]) -> Result<Self, ServiceError> {
        let limiters = policies
            .iter()
            .map(|p| {
                Ok(governor::RateLimiter::keyed(quota(*p)?)
                    .with_middleware::<StateInformationMiddleware>())
            })
            .collect::<Result<Vec<Keyed>, ServiceError>>()?;
        let limiters = Arc::new(limiters);
        let refused = Arc::new(Mutex::new(HashMap::new()));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(retain_recent(Arc::downgrade(&limiters), Arc::downgrade(&refused)));
        }
        Ok(Self { limiters, refused })
    }

    /// A refusal of `key` by `policy` while the last refusal's `Retry-After` runs.
    pub(crate) fn peek_refused(
        &self,
        policy: Policy,
        p: PolicyQuota,
        key: &LimitKey,
    ) -> Option<Decision> {
        let until = *self.refused.lock().ok()?.get(&(policy.index(), key.bytes()))?;
        let wait = until.checked_duration_since(Instant::now()).filter(|w| !w.is_zero())?;
        Some(Decision::refused(policy, p, wait))
    }

    pub(crate) fn check(&self, policy: Policy, p: PolicyQuota, key: &LimitKey) -> Decision {
        let interval = Duration::from_secs(p.window_secs) / p.limit;
        let Some(limiter) = self.limiters.get(policy.index()) else {
            // Unreachable: one limiter per policy. Allow rather than fail the request.
            return Decision {
                policy,
                allowed: true,
                limit: p.limit,
                window_secs: p.window_secs,
                remaining: p.limit,
                retry_after: Duration::ZERO,
                reset_after: Duration::ZERO,
            };
        };
        match limiter.check_key(&key.bytes()) {
            Ok(snapshot) => {
                let remaining = snapshot.remaining_burst_capacity().min(p.limit);
                if remaining == 0 {
                    // The quota is spent: the next request passes after at most one interval.
                    if let Ok(mut refused) = self.refused.lock() {
                        refused.insert((policy.index(), key.bytes()), Instant::now() + interval);
                    }
                }
                Decision {
                    policy,
                    allowed: true,
                    limit: p.limit,
                    window_secs: p.window_secs,
                    remaining,
                    retry_after: Duration::ZERO,
                    reset_after: interval * (p.limit - remaining),
                }
            }
            Err(not_until) => {
                let wait = not_until.wait_time_from(limiter.clock().now());
                if let Ok(mut refused) = self.refused.lock() {
                    refused.insert((policy.index(), key.bytes()), Instant::now() + wait);
                }
                Decision::refused(policy, p, wait)
            }
        }
    }
}

/// Drops idle keys every [`RETAIN_EVERY`] until the limiters are gone.
async fn retain_recent(limiters: Weak<Vec<Keyed>>, refused: Weak<Refused>) {
    let mut tick = tokio::time::interval(RETAIN_EVERY);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(limiters) = limiters.upgrade() else {
            return;
        };
        for limiter in limiters.iter() {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        if let Some(refused) = refused.upgrade() {
            if let Ok(mut map) = refused.lock() {
                let now = Instant::now();
                map.retain(|_, until| *until > now);
            }
        }
    }
}
