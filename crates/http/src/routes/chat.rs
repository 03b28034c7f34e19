//! `POST /api/v1/ai/chat/completions` (OpenAI-compatible).

use crate::dto::{BodyErrors, ChatCompletionRequest, GatewayErrors, ServerErrors};
use crate::error::ApiError;
use crate::extract::Authorized;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::usage::Endpoint;

/// Chat completion (API key with `ai_gateway`). The body is forwarded to the model's provider
/// and its answer returned unchanged (no envelope); `"stream": true` answers server-sent events.
/// A key's own limits: a model outside `allowed_models` is 403; a spent
/// `max_budget_usd` is 429 `budget_exceeded` (`limit_usd`, `spent_usd`, `reset`), an exhausted
/// `rpm_limit` / `tpm_limit` 429 `rate_limit_exceeded`, both with `Retry-After`; answers of
/// keys with `rpm_limit` / `tpm_limit` carry `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`.
#[utoipa::path(post, path = "/api/v1/ai/chat/completions", tag = "ai", request_body = ChatCompletionRequest,
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The provider's chat completion, unchanged: a `chat.completion` object, or with `\"stream\": true` server-sent events of `chat.completion.chunk` objects ending in `data: [DONE]`",
            headers(("x-aigw-deployment" = String, description = "The deployment that answered: `{provider}/{model}` (docs/routing.md)"), ("x-aigw-attempts" = u32, description = "Upstream calls made, retries and fallbacks included")),
            content(
                (Object = "application/json"),
                (crate::dto::ChatCompletionEvent = "text/event-stream")
            )),
        GatewayErrors, BodyErrors, ServerErrors))]
pub(crate) async fn completions(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ChatCompletion>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    crate::routes::gateway::forward(&state, &req, &caller, payload, Endpoint::Chat, Vec::new())
        .await
}
