//! `POST /api/v1/ai/embeddings` (OpenAI's embeddings).

use crate::dto::{BodyErrors, EmbeddingRequest, GatewayErrors, ServerErrors};
use crate::error::ApiError;
use crate::extract::Authorized;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::usage::Endpoint;

/// Embeddings (API key with `ai_gateway`). The body is forwarded to the model's provider
/// (`{base_url}/embeddings`) and its answer returned unchanged (no envelope). Governed as
/// chat completions are: `allowed_models` (403), budgets at every level (429
/// `budget_exceeded`, the worst case being the input's bytes, or its number of token ids),
/// `rpm_limit` / `tpm_limit` (429 `rate_limit_exceeded`, `x-ratelimit-*` headers), metered
/// from the answer's `usage.prompt_tokens`. A model whose provider serves no embeddings is
/// 400 naming `model`.
#[utoipa::path(post, path = "/api/v1/ai/embeddings", tag = "ai", request_body = EmbeddingRequest,
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The provider's answer, unchanged: a list of `embedding` objects with `usage`",
            headers(("x-aigw-deployment" = String, description = "The deployment that answered: `{provider}/{model}` (docs/routing.md)"), ("x-aigw-attempts" = u32, description = "Upstream calls made, retries and fallbacks included")),
            content((Object = "application/json"))),
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
        Endpoint::Embeddings,
        Vec::new(),
    )
    .await
}
