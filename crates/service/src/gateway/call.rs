//! What a gateway call carries from one stage to the next ([`crate::gateway::pipeline`]): the
//! call past admission, then metered; the settings of its attempts and the request they are
//! made for ([`crate::gateway::dispatch`]); and what served it.

use crate::auth::Principal;
use crate::config::GatewayConfig;
use crate::dialect::RequestSummary;
use crate::governance::key_limits::Admitted;
use crate::usage::meter::CallMeter;
use aigw_domain::usage::{Endpoint, TokenUsage};
use bytes::Bytes;
use rand::Rng;
use std::time::{Duration, Instant};

/// A call past admission: the body that goes upstream (lowered in clamp mode), its summary and
/// worst case, and what admission holds for it.
pub(crate) struct AdmittedCall {
    pub(crate) body: Bytes,
    pub(crate) summary: RequestSummary,
    pub(crate) worst: TokenUsage,
    pub(crate) admission: Admitted,
}

/// A call on its way upstream: the body as sent and its summary, whether the answer must carry
/// `usage`, and its meter (none for an access token or with metering off).
pub(crate) struct MeteredCall {
    pub(crate) body: Bytes,
    pub(crate) summary: RequestSummary,
    pub(crate) include_usage: bool,
    pub(crate) meter: Option<CallMeter>,
}

/// The settings of a call's attempts (`[gateway]`).
#[derive(Debug, Clone)]
pub(crate) struct Attempts {
    pub(crate) max_attempts: u32,
    pub(crate) deadline: Duration,
    pub(crate) retry_after_max: Duration,
    backoff: Duration,
    pub(crate) max_fallbacks: u32,
}

/// The longest backoff between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

impl Attempts {
    pub(crate) fn new(config: &GatewayConfig) -> Self {
        Self {
            max_attempts: config.max_attempts.max(1),
            deadline: Duration::from_secs(config.call_deadline_secs.max(1)),
            retry_after_max: Duration::from_secs(config.retry_after_max_secs),
            backoff: Duration::from_millis(config.retry_backoff_ms),
            max_fallbacks: config.max_fallbacks,
        }
    }

    /// The wait before attempt `attempt` (2, 3, …) at the same deployment: a random time up
    /// to the backoff doubled per attempt, at most [`MAX_BACKOFF`] (full jitter).
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let ceiling =
            self.backoff.saturating_mul(1 << attempt.saturating_sub(2).min(16)).min(MAX_BACKOFF);
        let millis = u64::try_from(ceiling.as_millis()).unwrap_or(0);
        Duration::from_millis(rand::thread_rng().gen_range(0..=millis))
    }
}

/// What served a call, for `x-aigw-deployment` and `x-aigw-attempts`.
#[derive(Debug, Clone, Default)]
pub struct Served {
    /// The deployment that answered, `{provider}/{model}`.
    pub deployment: String,
    /// Its provider.
    pub provider: String,
    /// Upstream calls made, every retry and fallback included (0 for the built-in model).
    pub attempts: u32,
}

/// The request of a dispatched call: who asks, at which endpoint, since when, with which
/// headers to pass on.
pub(crate) struct Request<'a> {
    pub(crate) principal: &'a Principal,
    pub(crate) endpoint: Endpoint,
    pub(crate) arrived: Instant,
    pub(crate) headers: &'a [(&'static str, String)],
}
