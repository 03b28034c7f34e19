//! `POST /api/v1/ai/responses` (OpenAI's Responses API).

use crate::dto::{BodyErrors, GatewayErrors, ResponseRequest, ServerErrors};
use crate::error::ApiError;
use crate::extract::Authorized;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::usage::Endpoint;

/// A response (API key with `ai_gateway`). The body is forwarded to the model's provider
/// (`{base_url}/responses`) and its answer returned unchanged (no envelope); `"stream": true`
/// answers server-sent events (`response.created` … `response.completed`). Governed as chat
/// completions are: `allowed_models` (403), budgets at every level and `tpm_limit` reserve the
/// worst case (the body's bytes plus `max_output_tokens`; input the gateway cannot see, such
/// as `previous_response_id`, at the model's `context_windows` entry, else 400 naming the
/// field for keys with a budget or a `tpm_limit`), `rpm_limit`; metered from the response's
/// `usage` (cached and reasoning tokens included). `background: true` is 400.
#[utoipa::path(post, path = "/api/v1/ai/responses", tag = "ai", request_body = ResponseRequest,
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The provider's response, unchanged: a `response` object, or with `\"stream\": true` server-sent events ending in `response.completed`",
            content((Object = "application/json"), (String = "text/event-stream"))),
        GatewayErrors, BodyErrors, ServerErrors))]
pub(crate) async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ChatCompletion>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    crate::routes::gateway::forward(&state, &req, &caller, payload, Endpoint::Responses).await
}
