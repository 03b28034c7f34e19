//! The AI gateway's pipeline: `POST /api/v1/ai/chat/completions` goes through one stage after
//! another, each below the one before, the parsed request passed down:
//!
//! 1. the dialect (`crate::dialect`): the body read once into a [`RequestSummary`];
//! 2. the route ([`crate::gateway::route`]): the provider that serves the model, and the key's
//!    allowed models;
//! 3. admission (`crate::governance`): budgets, rpm and tpm at every level the key counts
//!    against, reserved for the call's worst case (clamp mode may lower `max_tokens`);
//! 4. metering (`crate::usage`): the call enters the ledger's calls in flight and holds its
//!    reservations;
//! 5. forwarding ([`crate::gateway::upstream`], or [`crate::gateway::echo`]): the call sent
//!    upstream and its answer passed back;
//! 6. settlement: when the answer ends, the meter records the usage and settles the
//!    reservations (`crate::usage::meter`).
//!
//! What a call is forwarded as:
//!
//! - The request body is validated (`model`, `messages[i].role`, `messages[i].content`,
//!   `stream`) and then forwarded byte for byte to `{base_url}/chat/completions` with the
//!   provider's own key; the caller's API key never leaves the gateway. (A metered stream
//!   whose caller did not ask for usage gains `"stream_options":{"include_usage":true},`
//!   after the opening brace: see [`crate::usage::meter::CallMeter::upstream_body`].)
//! - A 2xx upstream answer is returned unchanged: JSON as JSON, and with `"stream": true`
//!   server-sent events passed through chunk by chunk as the upstream sends them.
//! - Upstream answers other than 2xx: a 4xx is passed to the
//!   caller as [`ServiceError::UpstreamRejected`] with the upstream's status and error message
//!   (so OpenAI SDKs raise the matching error and do not retry a 400), a 429 with the
//!   upstream's `Retry-After`; 401, 403 and 407 mean the gateway's own credentials or proxy
//!   are wrong and become 502 `upstream_error`, as do 3xx (redirects are never followed) and
//!   5xx. Unreachable: 502; no answer in time: 504 `upstream_timeout`.
//! - Answers are read up to `gateway.max_response_bytes`; a larger one is 502 (a stream is
//!   cut there). Upstream calls use no proxy unless `gateway.proxy_url` is set: the
//!   `*_PROXY` environment variables are ignored.
//! - The built-in `echo` model answers with the last user message, offline, in the same
//!   OpenAI shapes (JSON and SSE), with tokenizer counts as its `usage`.
//! - With a [`Meter`] ([`Gateway::with_meter`]), every routed call is metered into the usage
//!   ledger (`crate::usage`); for a stream the meter may ask the provider for `usage`.

use crate::auth::{Authorized, Principal};
use crate::config::{GatewayConfig, ProviderConfig};
use crate::db::Db;
use crate::dialect::reply::GatewayReply;
use crate::dialect::{self, Endpoint, RequestSummary};
use crate::error::ServiceError;
use crate::gateway::call::{AdmittedCall, Attempts, MeteredCall, Request, Served};
use crate::gateway::deployment::Route;
use crate::gateway::provider::Provider;
use crate::gateway::route::{route_table, RouteTable};
use crate::gateway::stored::StoredResponses;
use crate::gateway::upstream::{Forwarder, UpstreamCall};
use crate::governance::key_limits::{Admitted, SpendGovernance};
use crate::governance::key_rates::RateStatus;
use crate::metrics::{name as metric, Metrics};
use crate::usage::meter::Meter;
use aigw_domain::access::op;
use aigw_domain::usage::TokenUsage;
use aigw_domain::FieldError;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;

/// Request headers passed on to the upstream when the caller's request carries them: W3C
/// trace context and the request id.
pub const FORWARDED_HEADERS: [&str; 3] = ["traceparent", "tracestate", "x-request-id"];

/// A gateway call's answer: the reply, where the key stands against its own `rpm_limit` /
/// `tpm_limit` after the call was admitted (`None`: it has none; the `x-ratelimit-*`
/// headers), and what served it (`x-aigw-deployment`, `x-aigw-attempts`).
#[derive(Debug)]
pub struct GatewayAnswer {
    /// The provider's answer.
    pub reply: GatewayReply,
    /// The key's rate window.
    pub limits: Option<RateStatus>,
    /// The serving deployment and the attempts made.
    pub served: Served,
}

/// Routes chat completions to providers by model name, through the stages of the module
/// documentation.
#[derive(Debug, Clone)]
pub struct Gateway {
    routes: Arc<RouteTable>,
    upstream: Forwarder,
    attempts: Attempts,
    meter: Option<Meter>,
    key_limits: Option<SpendGovernance>,
    stored: Option<StoredResponses>,
    pub(super) metrics: Metrics,
}

impl Gateway {
    /// Builds the routing table (each provider's models, plus `echo` when enabled) and the
    /// upstream client.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when an `openai` provider has no `base_url` (or not an
    /// http(s) one), a model is routed twice, or the HTTP client cannot be built.
    pub fn new(config: &GatewayConfig, providers: &[ProviderConfig]) -> Result<Self, ServiceError> {
        Ok(Self {
            routes: Arc::new(route_table(config, providers)?),
            upstream: Forwarder::new(config, providers.len())?,
            attempts: Attempts::new(config),
            meter: None,
            key_limits: None,
            stored: None,
            metrics: Metrics::default(),
        })
    }

    /// Meters every routed call into the usage ledger with `meter`.
    pub fn with_meter(mut self, meter: Option<Meter>) -> Self {
        self.meter = meter;
        self
    }

    /// Counts upstream calls, their latency and time to first byte, and the gateway's own
    /// overhead into `metrics` (docs/operations.md).
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.upstream = self.upstream.with_metrics(metrics.clone());
        self.metrics = metrics;
        self
    }

    /// Enforces keys' budgets and their `rpm_limit` / `tpm_limit` with `key_limits`.
    pub fn with_key_limits(mut self, key_limits: SpendGovernance) -> Self {
        self.key_limits = Some(key_limits);
        self
    }

    /// Records who created each stored response (Responses API) in `db`, dated by `clock`,
    /// and passes retrievals through for that key only ([`crate::gateway::stored`]); without
    /// it no stored response is served.
    pub fn with_stored_responses(mut self, db: Db, clock: crate::Clock) -> Self {
        self.stored = Some(StoredResponses::new(db, clock));
        self
    }

    /// The owners of stored responses, when recorded.
    pub(super) fn stored_responses(&self) -> Option<&StoredResponses> {
        self.stored.as_ref()
    }

    /// The forwarder of upstream calls.
    pub(super) fn upstream(&self) -> &Forwarder {
        &self.upstream
    }

    /// Every routed provider, once per deployment.
    pub(super) fn providers(&self) -> impl Iterator<Item = Arc<Provider>> + '_ {
        self.routes.values().flat_map(|r| r.deployments.iter().map(|d| d.provider.clone()))
    }

    /// The route of `model`, when the gateway routes it.
    pub(super) fn route_of(&self, model: &str) -> Option<Arc<Route>> {
        self.routes.get(model).cloned()
    }

    /// The key limits, when enforced.
    pub(super) fn key_limits(&self) -> Option<&SpendGovernance> {
        self.key_limits.as_ref()
    }

    /// The settings of a call's attempts.
    pub(super) fn attempts(&self) -> &Attempts {
        &self.attempts
    }

    /// The models offered to `principal` (those its key's `allowed_models` match), sorted by
    /// name, each with the endpoints it is served on.
    pub fn models_for(&self, principal: &Principal) -> Vec<(String, &[Endpoint])> {
        self.routes
            .iter()
            .filter(|(m, _)| principal.allows_model(m))
            .map(|(m, route)| (m.clone(), route.endpoints.as_slice()))
            .collect()
    }

    /// The endpoints `model` is served on, when the gateway routes it and `principal`'s
    /// `allowed_models` match it; `None` otherwise.
    pub fn model_for(&self, principal: &Principal, model: &str) -> Option<&[Endpoint]> {
        let route = self.routes.get(model).filter(|_| principal.allows_model(model))?;
        Some(route.endpoints.as_slice())
    }

    /// Validates `body`, a request to `endpoint`, and answers it from the model's provider,
    /// for a request that arrived at `arrived` (the gateway's overhead is measured from there
    /// to the upstream call). `request_id` (the answer's `x-request-id`) identifies the call
    /// in the usage ledger; `forward_headers` (trace context, request id: names from
    /// [`FORWARDED_HEADERS`]; a dialect's own headers) go upstream with it. Also answers
    /// where the key stands against its own `rpm_limit` / `tpm_limit` after the call was
    /// admitted (`None`: the key has none), for the `x-ratelimit-*` headers.
    ///
    /// # Errors
    /// [`ServiceError::Forbidden`] for a model outside the key's `allowed_models`
    /// (`required: model:<name>`; `ai_gateway` itself is checked by the proof `principal`
    /// before this is called); [`ServiceError::Invalid`] on a malformed body (the fields of
    /// [`dialect::validate`], a model whose provider does not serve `endpoint`, and a part
    /// the gateway cannot price for a key with a budget or a `tpm_limit`);
    /// [`ServiceError::NotFound`] (`resource: model`) for an unknown model;
    /// [`ServiceError::BudgetExceeded`] when the key's budget cannot take the call's worst
    /// case; [`ServiceError::RateLimited`] when its `rpm_limit` or `tpm_limit` cannot;
    /// [`ServiceError::Upstream`] / [`ServiceError::UpstreamTimeout`] when the provider fails.
    pub async fn call(
        &self,
        endpoint: Endpoint,
        principal: &Authorized<op::ChatCompletion>,
        request_id: &str,
        body: Bytes,
        arrived: Instant,
        forward_headers: &[(&'static str, String)],
    ) -> Result<GatewayAnswer, ServiceError> {
        let summary = dialect::validate(endpoint, &body)?;
        let route = self.route(principal, &summary)?;
        let admitted = self.admit(principal, body, summary).await?;
        let limits = admitted.admission.status;
        let first = route.deployments.first().map_or("", |d| d.provider.name.as_str());
        let mut call = self.meter(principal, request_id, first, admitted);
        let request = Request { principal, endpoint, arrived, headers: forward_headers };
        let (reply, served) = self.dispatch(route, &mut call, &request).await;
        let created =
            self.stored.as_ref().and_then(|s| s.owner_of(endpoint, principal, &served.provider));
        // Settlement: the meter records the call and settles its reservations when the
        // answer (or the stream) ends.
        let reply = match call.meter {
            Some(meter) => meter.finish(reply),
            None => reply,
        };
        // A stored response: its owner recorded before the caller sees its id.
        let reply = match created {
            Some(created) => created.keep(reply).await,
            None => reply,
        };
        Ok(GatewayAnswer { reply: reply?, limits, served })
    }

    /// Anthropic's token counting (`POST /v1/messages/count_tokens`): `body` checked
    /// ([`dialect::messages::validate_count_tokens_request`]), the model routed as a Messages
    /// call (the key's `allowed_models` included) and the body forwarded to its provider's
    /// `/v1/messages/count_tokens`; the answer returned as it came. Free upstream, so neither
    /// admitted against any limit nor metered.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on a malformed body or a model whose provider does not serve
    /// the Messages API; [`ServiceError::Forbidden`] and [`ServiceError::NotFound`] as
    /// [`Self::call`]; the provider's failures as [`Self::call`].
    pub async fn count_tokens(
        &self,
        principal: &Authorized<op::ChatCompletion>,
        body: Bytes,
        arrived: Instant,
        forward_headers: &[(&'static str, String)],
    ) -> Result<GatewayReply, ServiceError> {
        let summary = dialect::messages::validate_count_tokens_request(&body)?;
        let route = self.route(principal, &summary)?;
        let provider = route
            .pick(Endpoint::Messages, 0, &[])
            .map(|(_, chosen)| chosen.deployment.provider.clone())
            .map_err(|_| ServiceError::NoDeployment {
                model: summary.model.chars().take(128).collect(),
                reason: "breakers_open",
                retry_after_secs: 1,
            })?;
        let upstream = UpstreamCall {
            provider,
            endpoint: Endpoint::Messages,
            method: http::Method::POST,
            suffix: "",
            model: summary.model,
            stream: false,
            arrived: Some(arrived),
            headers: forward_headers,
            count_tokens: true,
            head_timeout: None,
            breaker: None,
        };
        self.upstream.forward(upstream, body).await
    }

    /// The route: the provider that serves the summary's model, for a caller allowed it.
    ///
    /// # Errors
    /// [`ServiceError::Forbidden`] (`required: model:<name>`) outside the key's
    /// `allowed_models`; [`ServiceError::NotFound`] (`resource: model`) for an unknown model;
    /// [`ServiceError::Invalid`] (`model`) when its provider does not serve the endpoint.
    fn route(
        &self,
        principal: &Principal,
        summary: &RequestSummary,
    ) -> Result<Arc<Route>, ServiceError> {
        principal.authorize_model(&summary.model)?;
        let route = self.routes.get(&summary.model).ok_or_else(|| ServiceError::NotFound {
            resource: "model",
            id: summary.model.chars().take(128).collect(),
        })?;
        route.check_serves(summary.endpoint)?;
        Ok(route.clone())
    }

    /// Admission at every level the caller's key counts against, for the call's worst case;
    /// in clamp mode the call may go on with a lowered `max_tokens` (its body and summary
    /// replaced). With no key limits configured, nothing is held.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] for a file sent by id on a key with a budget or a
    /// `tpm_limit`; [`ServiceError::BudgetExceeded`] and [`ServiceError::RateLimited`] naming
    /// the level that refused; [`ServiceError::Unavailable`] when the counters are down.
    pub(super) async fn admit(
        &self,
        principal: &Principal,
        body: Bytes,
        summary: RequestSummary,
    ) -> Result<AdmittedCall, ServiceError> {
        let worst = TokenUsage::new(summary.prompt_bound, summary.completion_cap);
        let Some(limits) = &self.key_limits else {
            return Ok(AdmittedCall { body, summary, worst, admission: Admitted::default() });
        };
        let mut summary = summary;
        if let Some(field) = &summary.unbounded_part {
            let limited = principal.limit_levels().any(|level| {
                level.policy.max_budget_micros.is_some() || level.policy.tpm_limit.is_some()
            });
            if limited {
                // Input the gateway cannot see: the model's whole context window is the
                // prompt's bound, when configured.
                let Some(window) = limits.context_window(&summary.model) else {
                    return Err(FieldError::new(
                        field.clone(),
                        "this input cannot be priced before the call, so a key with a budget \
                         or a tpm_limit must send it in the request (a file as file_data), or \
                         the model needs a context_windows entry",
                    )
                    .into());
                };
                summary.prompt_bound = summary.prompt_bound.max(window);
                summary.prompt_floor = window;
            }
        }
        let worst = TokenUsage::new(summary.prompt_bound, summary.completion_cap);
        let admitted = limits.admit(principal, &summary, &body).await;
        let mut admission = admitted.inspect_err(|refused| self.count_refusal(refused))?;
        // A budget in `clamp` mode lowered `max_tokens`: that body goes upstream.
        Ok(match admission.clamped.take() {
            Some((body, summary)) => {
                let worst = TokenUsage::new(summary.prompt_bound, summary.completion_cap);
                AdmittedCall { body, summary, worst, admission }
            }
            None => AdmittedCall { body, summary, worst, admission },
        })
    }

    /// Metering: the call enters the ledger (a key's call only) holding its reservations,
    /// and its body asks a stream's provider for `usage` where the caller did not. Without
    /// metering there is no real cost: the reservations stay charged.
    fn meter(
        &self,
        principal: &Principal,
        request_id: &str,
        provider: &str,
        call: AdmittedCall,
    ) -> MeteredCall {
        let AdmittedCall { body, summary, worst, admission } = call;
        let meter = self
            .meter
            .as_ref()
            .and_then(|m| m.start(principal, request_id, &summary, provider, &body));
        match meter {
            Some(mut meter) => {
                meter.hold(admission, worst);
                let (body, include_usage) = meter.upstream_body(body, &summary);
                MeteredCall { body, summary, include_usage, meter: Some(meter) }
            }
            None => {
                let include_usage = summary.include_usage;
                MeteredCall { body, summary, include_usage, meter: None }
            }
        }
    }

    /// Counts a refusal by a limit of the key or its team (`aigw_limit_refusals_total`).
    fn count_refusal(&self, refused: &ServiceError) {
        let (scope, reason) = match refused {
            ServiceError::BudgetExceeded { scope, .. } => (*scope, "budget"),
            ServiceError::RateLimited { scope: Some(scope), .. } => (*scope, "rate"),
            _ => return,
        };
        self.metrics
            .count(metric::LIMIT_REFUSALS_TOTAL, &[("scope", scope.as_str()), ("reason", reason)]);
    }
}
