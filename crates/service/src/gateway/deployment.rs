//! A model's deployments: each provider that lists the model serves it as one deployment,
//! with the name its upstream knows the model by, its `weight`, its own per-node quota
//! (`rpm_limit`, `tpm_limit`) and its circuit breaker ([`crate::gateway::breaker`]).
//! [`Route::pick`] chooses among the deployments that may take a call now, by weight.

use crate::error::ServiceError;
use crate::gateway::breaker::{Breaker, Pass, ProbeGuard};
use crate::gateway::provider::Provider;
use aigw_domain::usage::Endpoint;
use aigw_domain::FieldError;
use governor::{DefaultDirectRateLimiter, Quota};
use rand::Rng;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// One provider serving one model.
#[derive(Debug)]
pub(crate) struct Deployment {
    /// `{provider}/{model}`: the `x-aigw-deployment` header and the metrics' label.
    pub(crate) name: String,
    /// The provider.
    pub(crate) provider: Arc<Provider>,
    /// The model's name at the gateway.
    pub(crate) model: String,
    /// The model's name upstream, when it differs (`upstream_models`): the body's `model`
    /// is rewritten to it.
    pub(crate) upstream_model: Option<String>,
    /// Its share of the model's calls among the deployments that may take them.
    pub(crate) weight: u32,
    /// Its breaker.
    pub(crate) breaker: Breaker,
    /// Its quota on this node: requests per minute.
    rpm: Option<DefaultDirectRateLimiter>,
    /// Its quota on this node: tokens per minute.
    tpm: Option<DefaultDirectRateLimiter>,
}

/// A model as the gateway routes it: its deployments and what is tried when they fail.
#[derive(Debug)]
pub(crate) struct Route {
    /// The model's name.
    pub(crate) model: String,
    /// Its deployments, in configuration order.
    pub(crate) deployments: Vec<Arc<Deployment>>,
    /// The endpoints some deployment serves.
    pub(crate) endpoints: Vec<Endpoint>,
    /// Models tried, in order, when every deployment failed (`gateway.fallbacks`).
    pub(crate) fallbacks: Vec<String>,
    /// Models tried, in order, when the upstream refused the request as too long
    /// (`gateway.context_window_fallbacks`).
    pub(crate) context_window_fallbacks: Vec<String>,
}

/// A deployment chosen for one attempt, with its probe when its breaker is half open.
#[derive(Debug)]
pub(crate) struct Chosen {
    pub(crate) deployment: Arc<Deployment>,
    pub(crate) probe: Option<ProbeGuard>,
}

/// Why no deployment could take a call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Unavailable {
    /// Every deployment's breaker is open: the soonest one closes after this long.
    BreakersOpen(Duration),
    /// Every deployment is at its own quota (or open).
    AtQuota,
    /// Every deployment of the endpoint was tried in this call.
    AllTried,
}

impl Deployment {
    /// A deployment of `model` at `provider`.
    pub(crate) fn new(
        provider: Arc<Provider>,
        model: &str,
        upstream_model: Option<String>,
        weight: u32,
        (rpm_limit, tpm_limit): (Option<u32>, Option<u32>),
        breaker: Breaker,
    ) -> Self {
        let per_minute =
            |limit: Option<u32>| limit.and_then(NonZeroU32::new).map(Quota::per_minute);
        Self {
            name: format!("{}/{model}", provider.name),
            provider,
            model: model.to_owned(),
            upstream_model,
            weight,
            breaker,
            rpm: per_minute(rpm_limit).map(governor::RateLimiter::direct),
            tpm: per_minute(tpm_limit).map(governor::RateLimiter::direct),
        }
    }

    /// Whether the deployment serves `endpoint`.
    pub(crate) fn serves(&self, endpoint: Endpoint) -> bool {
        self.provider.kind.endpoints().contains(&endpoint)
    }

    /// Takes a call of `tokens` worst-case tokens from its quota; `false` (nothing taken)
    /// when the quota cannot take it now. A call larger than the whole tpm quota is let
    /// through when the quota is full, so that it is not refused forever.
    fn take_quota(&self, tokens: u64) -> bool {
        if let Some(rpm) = &self.rpm {
            if rpm.check().is_err() {
                return false;
            }
        }
        if let Some(tpm) = &self.tpm {
            let n = NonZeroU32::new(u32::try_from(tokens.max(1)).unwrap_or(u32::MAX))
                .unwrap_or(NonZeroU32::MIN);
            match tpm.check_n(n) {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return false,
                // Larger than the quota itself: counted as the whole quota.
                Err(_) => return tpm.check_n(NonZeroU32::MIN).is_ok(),
            }
        }
        true
    }
}

impl Route {
    /// Chooses a deployment for an attempt at `endpoint` for a call of `tokens` worst-case
    /// tokens, skipping those in `tried` (unless every candidate was tried: then any may
    /// be tried again), those whose breaker is open and those at their quota; among the
    /// rest, by weight (weight 0 only when no other is left).
    ///
    /// # Errors
    /// Why none can take the call.
    pub(crate) fn pick(
        &self,
        endpoint: Endpoint,
        tokens: u64,
        tried: &[usize],
    ) -> Result<(usize, Chosen), Unavailable> {
        let serving = |i: &usize| self.deployments[*i].serves(endpoint);
        let mut candidates: Vec<usize> =
            (0..self.deployments.len()).filter(serving).filter(|i| !tried.contains(i)).collect();
        if candidates.is_empty() {
            candidates = (0..self.deployments.len()).filter(serving).collect();
        }
        let mut soonest: Option<Duration> = None;
        let mut at_quota = false;
        while !candidates.is_empty() {
            let at = weighted(&candidates, |i| self.deployments[i].weight);
            let index = candidates.swap_remove(at);
            let deployment = &self.deployments[index];
            let probe = match deployment.breaker.pass() {
                Pass::Closed => None,
                Pass::Probe(probe) => Some(probe),
                Pass::Refused(wait) => {
                    soonest = Some(soonest.map_or(wait, |s| s.min(wait)));
                    continue;
                }
            };
            if !deployment.take_quota(tokens) {
                at_quota = true;
                continue;
            }
            return Ok((index, Chosen { deployment: deployment.clone(), probe }));
        }
        Err(match (at_quota, soonest) {
            (true, _) => Unavailable::AtQuota,
            (false, Some(wait)) => Unavailable::BreakersOpen(wait),
            (false, None) => Unavailable::AllTried,
        })
    }

    /// Whether some deployment serves `endpoint`.
    pub(crate) fn serves(&self, endpoint: Endpoint) -> bool {
        self.endpoints.contains(&endpoint)
    }

    /// Checks that some deployment serves `endpoint`.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] naming `model` and the endpoints it has.
    pub(crate) fn check_serves(&self, endpoint: Endpoint) -> Result<(), ServiceError> {
        if self.serves(endpoint) {
            return Ok(());
        }
        let names: Vec<&str> = self.endpoints.iter().map(|e| e.as_str()).collect();
        let model: String = self.model.chars().take(128).collect();
        Err(FieldError::new(
            "model",
            format!(
                "{model} is not served on the {} endpoint; its endpoints: {}",
                endpoint.as_str(),
                names.join(", ")
            ),
        )
        .into())
    }
}

/// The position in `candidates` chosen at random with each one's `weight`; the weight-0
/// ones only when every candidate weighs 0 (then uniformly).
fn weighted(candidates: &[usize], weight: impl Fn(usize) -> u32) -> usize {
    if candidates.len() == 1 {
        return 0;
    }
    let total: u64 = candidates.iter().map(|c| u64::from(weight(*c))).sum();
    let mut rng = rand::thread_rng();
    if total == 0 {
        return rng.gen_range(0..candidates.len());
    }
    let mut ticket = rng.gen_range(0..total);
    for (at, candidate) in candidates.iter().enumerate() {
        let w = u64::from(weight(*candidate));
        if ticket < w {
            return at;
        }
        ticket -= w;
    }
    candidates.len() - 1
}

#[cfg(test)]
mod tests {
    use super::weighted;

    #[test]
    fn weights_share_the_picks() {
        let weights = [3_u32, 1, 0];
        let mut picks = [0_u32; 3];
        for _ in 0..4000 {
            picks[weighted(&[0, 1, 2], |i| weights[i])] += 1;
        }
        assert_eq!(picks[2], 0, "a weight of 0 was picked beside others");
        assert!((2700..3300).contains(&picks[0]), "{picks:?}");
        assert!((700..1300).contains(&picks[1]), "{picks:?}");
    }

    #[test]
    fn weight_zero_alone_is_picked() {
        let mut seen = [false; 2];
        for _ in 0..200 {
            seen[weighted(&[5, 7], |_| 0)] = true;
        }
        assert_eq!(seen, [true, true], "weight-0 candidates alone are picked uniformly");
        assert_eq!(weighted(&[9], |_| 0), 0);
    }
}
