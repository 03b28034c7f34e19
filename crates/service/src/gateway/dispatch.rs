//! The fifth stage of a gateway call: its attempts. A routed call is sent to one of its
//! model's deployments ([`Route::pick`]); when that attempt fails before the caller received
//! anything (a connect error, no answer head in time, a 429, 500, 502, 503 or 504), it is
//! tried again, on another deployment while one is untried, else on the same one after a
//! backoff with jitter (or the upstream's `Retry-After`, up to `gateway.retry_after_max_secs`),
//! up to `gateway.max_attempts` attempts per model. When every attempt at the model failed,
//! its `gateway.fallbacks` are tried in order (depth first, each with its own attempts, at
//! most `gateway.max_fallbacks` of them); when the upstream refused the request as longer
//! than the model's context window, its `gateway.context_window_fallbacks` are. A fallback is
//! taken only if the key's (and its team's) `allowed_models` allow it and it serves the
//! endpoint, and it is admitted afresh at its own price (a refusal there is the call's answer
//! when nothing else serves). All within `gateway.call_deadline_secs` of the call's arrival.
//!
//! Never retried: a 4xx other than 429 (the request itself is refused), and anything after
//! an answer began: a stream that breaks is passed on broken, and billed for what came.

use crate::auth::Principal;
use crate::config::ProviderKind;
use crate::dialect::model::with_model;
use crate::dialect::reply::GatewayReply;
use crate::error::ServiceError;
use crate::gateway::breaker::BreakerState;
use crate::gateway::call::{MeteredCall, Request, Served};
use crate::gateway::deployment::{Chosen, Deployment, Route, Unavailable};
use crate::gateway::echo::echo;
use crate::gateway::pipeline::Gateway;
use crate::gateway::upstream::{record_overhead, Failure, UpstreamCall};
use crate::metrics::name as metric;
use aigw_domain::FieldError;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The provider and model named in the record of a call no deployment served: the
/// deployment tried last, or `route`'s first deployment and model when none could be tried.
fn tried_last<'a>(last: Option<&'a Deployment>, route: &'a Route) -> (&'a str, &'a str) {
    match last {
        Some(deployment) => (&deployment.provider.name, &deployment.model),
        None => (route.deployments.first().map_or("", |d| d.provider.name.as_str()), &route.model),
    }
}

/// How the attempts at one model ended.
enum ModelOutcome {
    /// A deployment answered.
    Answered(GatewayReply, Arc<Deployment>),
    /// The answer is this error, whatever else could be tried (a 4xx of the request itself).
    Final(ServiceError),
    /// The upstream refused the request as too long: the context-window fallbacks may serve.
    TooLong(ServiceError),
    /// Every attempt failed, or none could be made: the fallbacks may serve.
    Failed(ServiceError),
}

impl Gateway {
    /// Sends `call` to `route`'s deployments, and to its fallbacks when they fail, as the
    /// module documentation says; answers the reply and what served it. The meter (if any) is
    /// told which deployment served and after how many attempts.
    ///
    /// # Errors
    /// The last attempt's failure ([`ServiceError::Upstream`], `UpstreamTimeout`,
    /// `UpstreamRejected`); [`ServiceError::NoDeployment`] when no deployment could be tried
    /// at all (breakers open, quotas full); a fallback's admission refusal
    /// ([`ServiceError::BudgetExceeded`], `RateLimited`) when no fallback could be taken.
    pub(crate) async fn dispatch(
        &self,
        route: Arc<Route>,
        call: &mut MeteredCall,
        request: &Request<'_>,
    ) -> (Result<GatewayReply, ServiceError>, Served) {
        let attempts = self.attempts();
        let deadline = request.arrived + attempts.deadline;
        let mut served = Served::default();
        let mut route = route;
        let mut visited = vec![route.model.clone()];
        let mut next_models: Vec<String> = Vec::new();
        let mut hops = 0_u32;
        let mut refusal: Option<ServiceError> = None;
        // The deployment the last attempt went to, for the record of a call none served.
        let mut last_tried: Option<Arc<Deployment>> = None;
        loop {
            let tally = (&mut served.attempts, &mut last_tried);
            let outcome = self.attempt_model(&route, call, request, deadline, tally).await;
            let (error, fallbacks) = match outcome {
                ModelOutcome::Answered(reply, deployment) => {
                    deployment.name.clone_into(&mut served.deployment);
                    deployment.provider.name.clone_into(&mut served.provider);
                    if let Some(meter) = call.meter.as_mut() {
                        meter.served(&deployment.provider.name, &deployment.model, served.attempts);
                    }
                    return (Ok(reply), served);
                }
                ModelOutcome::Final(error) => return (Err(error), served),
                ModelOutcome::TooLong(error) if route.context_window_fallbacks.is_empty() => {
                    return (Err(error), served)
                }
                ModelOutcome::TooLong(error) => (error, &route.context_window_fallbacks),
                ModelOutcome::Failed(error) => (error, &route.fallbacks),
            };
            // Depth first: this model's fallbacks before the rest of the list it came from.
            next_models.extend(fallbacks.iter().rev().cloned());
            let from = route.model.clone();
            let next = loop {
                let Some(model) = next_models.pop() else { break None };
                if hops >= attempts.max_fallbacks || Instant::now() >= deadline {
                    break None;
                }
                if visited.contains(&model) {
                    continue;
                }
                visited.push(model.clone());
                let Some(candidate) = self.route_of(&model) else { continue };
                let allowed = request.principal.authorize_model(&model).is_ok();
                if !allowed || !candidate.serves(request.endpoint) {
                    continue;
                }
                hops += 1;
                match self.readmit(request.principal, call, &model).await {
                    Ok(()) => break Some(candidate),
                    Err(refused) => refusal = Some(refused),
                }
            };
            let Some(next) = next else {
                if let Some(meter) = call.meter.as_mut() {
                    let (provider, model) = tried_last(last_tried.as_deref(), &route);
                    meter.served(provider, model, served.attempts);
                }
                return (Err(refusal.unwrap_or(error)), served);
            };
            self.metrics
                .count(metric::FALLBACKS_TOTAL, &[("model", &from), ("fallback", &next.model)]);
            route = next;
        }
    }

    /// The attempts at one model: up to `gateway.max_attempts`, as the module docs say.
    async fn attempt_model(
        &self,
        route: &Route,
        call: &MeteredCall,
        request: &Request<'_>,
        deadline: Instant,
        (attempts_made, last_tried): (&mut u32, &mut Option<Arc<Deployment>>),
    ) -> ModelOutcome {
        let settings = self.attempts();
        let tokens = call.summary.prompt_bound.saturating_add(call.summary.completion_cap);
        let serving = route.deployments.iter().filter(|d| d.serves(request.endpoint)).count();
        let mut tried: Vec<usize> = Vec::new();
        let mut last: Option<ServiceError> = None;
        for attempt in 1..=settings.max_attempts {
            let (index, chosen) = match route.pick(request.endpoint, tokens, &tried) {
                Ok(picked) => picked,
                Err(why) => {
                    return ModelOutcome::Failed(last.unwrap_or_else(|| none_could(route, why)))
                }
            };
            tried.push(index);
            let first = *attempts_made == 0;
            if chosen.deployment.provider.kind != ProviderKind::Echo {
                *attempts_made += 1;
            }
            let deployment = chosen.deployment.clone();
            *last_tried = Some(deployment.clone());
            let failure = match self.attempt(chosen, call, (request, first), deadline).await {
                Ok(reply) => return ModelOutcome::Answered(reply, deployment),
                Err(failure) => failure,
            };
            if failure.too_long {
                return ModelOutcome::TooLong(failure.error);
            }
            let Some(retry_after) = failure.retry else {
                return ModelOutcome::Final(failure.error);
            };
            last = Some(failure.error);
            if attempt == settings.max_attempts {
                break;
            }
            // Another deployment untried: at once. Else the same one, after a wait.
            if tried.len() < serving {
                continue;
            }
            let wait = match retry_after {
                Some(after) if after > settings.retry_after_max => break,
                Some(after) => after,
                None => settings.backoff(attempt + 1),
            };
            if Instant::now() + wait >= deadline {
                break;
            }
            tokio::time::sleep(wait).await;
        }
        ModelOutcome::Failed(last.unwrap_or_else(|| none_could(route, Unavailable::AllTried)))
    }

    /// One attempt at the `chosen` deployment (`first`: the call's first): the call's body (its
    /// `model` renamed for the deployment's upstream) sent, the breaker told of the outcome,
    /// the attempt counted.
    async fn attempt(
        &self,
        chosen: Chosen,
        call: &MeteredCall,
        (request, first): (&Request<'_>, bool),
        deadline: Instant,
    ) -> Result<GatewayReply, Failure> {
        let Chosen { deployment, probe } = chosen;
        let before = deployment.breaker.state();
        let result = if deployment.provider.kind == ProviderKind::Echo {
            let reply = serde_json::from_slice::<Value>(&call.body)
                .map(|parsed| echo(&parsed, &call.summary, call.include_usage))
                .map_err(|_| FieldError::new("body", "is not valid JSON").into());
            record_overhead(&self.metrics, &deployment.provider.name, request.arrived);
            reply.map_err(|error| Failure {
                error,
                retry: None,
                deployment_failed: false,
                too_long: false,
            })
        } else {
            let body = match &deployment.upstream_model {
                Some(name) => with_model(&call.body, name).unwrap_or_else(|| call.body.clone()),
                None => call.body.clone(),
            };
            let upstream = UpstreamCall {
                provider: deployment.provider.clone(),
                endpoint: request.endpoint,
                method: http::Method::POST,
                suffix: "",
                model: call.summary.model.clone(),
                stream: call.summary.stream,
                // The gateway's overhead: up to the call's first upstream request.
                arrived: first.then_some(request.arrived),
                headers: request.headers,
                count_tokens: false,
                head_timeout: Some(deadline.saturating_duration_since(Instant::now())),
                breaker: Some(deployment.breaker.clone()),
            };
            self.upstream().attempt(upstream, body).await
        };
        let outcome = match &result {
            Ok(_) => {
                deployment.breaker.succeeded(probe);
                "ok"
            }
            Err(failure) if failure.deployment_failed => {
                deployment.breaker.failed(probe);
                "failed"
            }
            Err(_) => {
                // A refusal of the request: the deployment answered.
                deployment.breaker.succeeded(probe);
                "refused"
            }
        };
        let labels = [("deployment", deployment.name.as_str()), ("outcome", outcome)];
        self.metrics.count(metric::UPSTREAM_ATTEMPTS_TOTAL, &labels);
        let after = deployment.breaker.state();
        if after != before {
            self.metrics.gauge(
                metric::BREAKER_STATE,
                &[("deployment", deployment.name.as_str())],
                after.gauge(),
            );
            if after == BreakerState::Open {
                tracing::warn!(deployment = %deployment.name, "circuit breaker opened");
            }
        }
        result
    }

    /// Admits `call` afresh for the fallback `model`: what it held is given back, the body
    /// names `model`, and every level is admitted for that model's worst case.
    ///
    /// # Errors
    /// The admission's refusal ([`ServiceError::BudgetExceeded`], `RateLimited`, …).
    async fn readmit(
        &self,
        principal: &Principal,
        call: &mut MeteredCall,
        model: &str,
    ) -> Result<(), ServiceError> {
        let body = with_model(&call.body, model).unwrap_or_else(|| call.body.clone());
        let mut summary = call.summary.clone();
        model.clone_into(&mut summary.model);
        if let (Some(limits), Some(meter)) = (self.key_limits(), call.meter.as_mut()) {
            limits.release(meter.take_held()).await;
        }
        let admitted = self.admit(principal, body, summary).await?;
        if let Some(meter) = call.meter.as_mut() {
            meter.rehold(admitted.admission);
        }
        call.body = admitted.body;
        call.summary = admitted.summary;
        Ok(())
    }
}

/// The error of a model none of whose deployments could be tried.
fn none_could(route: &Route, why: Unavailable) -> ServiceError {
    let (reason, wait) = match why {
        Unavailable::BreakersOpen(wait) => ("breakers_open", wait),
        Unavailable::AtQuota => ("at_quota", Duration::from_secs(1)),
        Unavailable::AllTried => ("breakers_open", Duration::from_secs(1)),
    };
    ServiceError::NoDeployment {
        model: route.model.chars().take(128).collect(),
        reason,
        retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
    }
}
