//! `POST /api/v1/ai/anthropic/v1/messages` and `/v1/messages/count_tokens` (Anthropic's
//! Messages API): with `base_url = "http://HOST/api/v1/ai/anthropic"` Anthropic's SDKs work
//! unmodified. The key is accepted in `x-api-key` as in `Authorization`
//! (`crate::extract::AcceptsXApiKey` on the scope), and every error answer also carries
//! Anthropic's error shape (`crate::middleware::anthropic_errors`).

use crate::dto::{BodyErrors, GatewayErrors, MessagesRequest, ServerErrors};
use crate::error::ApiError;
use crate::extract::{read_json_payload, Authorized};
use crate::state::AppState;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::usage::Endpoint;
use aigw_service::GatewayReply;

/// The caller's headers passed upstream on these routes beside the trace context: the API
/// version and the beta features asked for.
const PASSED_HEADERS: [&str; 2] = ["anthropic-version", "anthropic-beta"];

/// The caller's `anthropic-version` and `anthropic-beta` (several values joined with `,`),
/// to pass upstream; values that are not visible ASCII are left out.
pub(crate) fn anthropic_headers(req: &HttpRequest) -> Vec<(&'static str, String)> {
    PASSED_HEADERS
        .iter()
        .filter_map(|name| {
            let values: Vec<&str> =
                req.headers().get_all(*name).filter_map(|v| v.to_str().ok()).collect();
            (!values.is_empty()).then(|| (*name, values.join(",")))
        })
        .collect()
}

/// A message (API key with `ai_gateway`, in `x-api-key` or `Authorization`). The body is
/// forwarded to the model's provider (`{base_url}/v1/messages`, with the provider's key in
/// `x-api-key` and the caller's `anthropic-version` and `anthropic-beta`) and its answer
/// returned unchanged; `"stream": true` answers server-sent events (`message_start` …
/// `message_stop`). Governed as chat completions are: `allowed_models` (403), budgets at
/// every level and `tpm_limit` reserve the worst case (the body's bytes plus `max_tokens`;
/// a document sent by file id or URL, web search or fetch tools and `mcp_servers` are 400
/// naming the field for keys with a budget or a `tpm_limit`, unless the model has a
/// `context_windows` entry), `rpm_limit`; metered from the message's `usage` (cache writes
/// and reads priced at their own prices). Errors carry Anthropic's `type: "error"` and
/// `error.type` beside aigw's envelope.
#[utoipa::path(post, path = "/api/v1/ai/anthropic/v1/messages", tag = "ai", request_body = MessagesRequest,
    security(("api_key" = []), ("x_api_key" = [])),
    responses(
        (status = 200, description = "The provider's message, unchanged: a `message` object, or with `\"stream\": true` server-sent events from `message_start` to `message_stop`",
            headers(("x-aigw-deployment" = String, description = "The deployment that answered: `{provider}/{model}` (docs/routing.md)"), ("x-aigw-attempts" = u32, description = "Upstream calls made, retries and fallbacks included")),
            content((Object = "application/json"), (String = "text/event-stream"))),
        GatewayErrors, BodyErrors, ServerErrors))]
pub(crate) async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ChatCompletion>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    crate::routes::gateway::forward(
        &state,
        &req,
        &caller,
        payload,
        Endpoint::Messages,
        anthropic_headers(&req),
    )
    .await
}

/// Counts a message's input tokens (API key with `ai_gateway`, in `x-api-key` or
/// `Authorization`): the body (a Messages request without `max_tokens`) is checked, its
/// model routed as for a message (`allowed_models` included) and the body forwarded to the
/// provider's `/v1/messages/count_tokens`; the answer (`{"input_tokens": n}`) is returned
/// unchanged. Free upstream, so neither metered nor counted against any budget or
/// `tpm_limit` (the route's rate limit applies).
#[utoipa::path(post, path = "/api/v1/ai/anthropic/v1/messages/count_tokens", tag = "ai", request_body = MessagesRequest,
    security(("api_key" = []), ("x_api_key" = [])),
    responses(
        (status = 200, description = "The provider's count, unchanged: `{\"input_tokens\": n}`", body = Object),
        GatewayErrors, BodyErrors, ServerErrors))]
pub(crate) async fn count_tokens(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ChatCompletion>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    state.account_email.ensure_email_verified(&caller).await?;
    let body = read_json_payload(&req, payload).await?;
    let request_id = crate::request_id::current_request_id();
    let arrived = req
        .extensions()
        .get::<crate::middleware::access_log::Arrival>()
        .map_or_else(std::time::Instant::now, |a| a.0);
    let mut forward = crate::telemetry::upstream_headers(&req, &request_id);
    forward.extend(anthropic_headers(&req));
    let reply = state.gateway.count_tokens(&caller, body, arrived, &forward).await?;
    Ok(match reply {
        GatewayReply::Json { status, body } => {
            HttpResponse::build(crate::routes::gateway::actix_status(status))
                .content_type("application/json")
                .body(body)
        }
        GatewayReply::Stream { .. } => {
            return Err(ApiError::internal("a token count answered a stream"));
        }
    })
}
