//! `/api/v1/ai/chat/completions` and `/api/v1/ai/models` (OpenAI-compatible).

use crate::dto::{
    BodyErrors, ChatCompletionRequest, ErrorEnvelope, ModelDto, ModelList, ServerErrors,
};
use crate::error::ApiError;
use crate::extract::{read_json_payload, Authorized};
use crate::startup::AppState;
use actix_web::http::header::HeaderName;
use actix_web::http::StatusCode;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_service::ChatReply;
use futures_util::StreamExt;

/// OpenAI's `x-ratelimit-*` header names (issue 9), built at compile time: parsing them
/// again for every answer of a limited key was about 1 % of its call.
static RATE_LIMIT_HEADERS: [HeaderName; 6] = [
    HeaderName::from_static("x-ratelimit-limit-requests"),
    HeaderName::from_static("x-ratelimit-remaining-requests"),
    HeaderName::from_static("x-ratelimit-reset-requests"),
    HeaderName::from_static("x-ratelimit-limit-tokens"),
    HeaderName::from_static("x-ratelimit-remaining-tokens"),
    HeaderName::from_static("x-ratelimit-reset-tokens"),
];

/// The prebuilt [`HeaderName`] of `name`, if it is one of [`RATE_LIMIT_HEADERS`].
fn rate_limit_header(name: &str) -> Option<HeaderName> {
    RATE_LIMIT_HEADERS.iter().find(|h| h.as_str() == name).cloned()
}

/// Chat completion (API key with `ai_gateway`). The body is forwarded to the model's provider
/// and its answer returned unchanged (no envelope); `"stream": true` answers server-sent events.
/// A key's own limits (issue 9): a model outside `allowed_models` is 403; a spent
/// `max_budget_usd` is 429 `budget_exceeded` (`limit_usd`, `spent_usd`, `reset`), an exhausted
/// `rpm_limit` / `tpm_limit` 429 `rate_limit_exceeded`, both with `Retry-After`; answers of
/// keys with `rpm_limit` / `tpm_limit` carry `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`.
#[utoipa::path(post, path = "/api/v1/ai/chat/completions", tag = "ai", request_body = ChatCompletionRequest,
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The provider's chat completion, unchanged: a `chat.completion` object, or with `\"stream\": true` server-sent events of `chat.completion.chunk` objects ending in `data: [DONE]`",
            content(
                (Object = "application/json"),
                (crate::dto::ChatCompletionEvent = "text/event-stream")
            )),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Access token, key without ai_gateway, or a model outside the key's allowed_models (required: model:<name>)", body = ErrorEnvelope),
        (status = 404, description = "Unknown model", body = ErrorEnvelope),
        BodyErrors,
        (status = 409, description = "The upstream refused the request (upstream_rejected, the upstream's status)", body = ErrorEnvelope),
        (status = 422, description = "The upstream refused the request (upstream_rejected, the upstream's status)", body = ErrorEnvelope),
        (status = 502, body = ErrorEnvelope), (status = 504, body = ErrorEnvelope),
        ServerErrors))]
pub async fn completions(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ChatCompletion>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    // Read only now that the caller is known (see `read_json_payload`).
    let body = read_json_payload(&req, payload).await?;
    let request_id = crate::error::current_request_id();
    let arrived = req
        .extensions()
        .get::<crate::telemetry::Arrival>()
        .map_or_else(std::time::Instant::now, |a| a.0);
    let forward = crate::telemetry::upstream_headers(&req, &request_id);
    let (reply, limits) =
        state.gateway.chat_completion_since(&caller, &request_id, body, arrived, &forward).await?;
    // A key with its own rpm_limit / tpm_limit: OpenAI's x-ratelimit-* headers (issue 9).
    let with_limits = |status: u16| {
        let mut builder =
            HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::OK));
        for (name, value) in limits.iter().flat_map(|l| l.headers()) {
            match rate_limit_header(name) {
                Some(name) => builder.insert_header((name, value)),
                None => builder.insert_header((name, value)),
            };
        }
        builder
    };
    Ok(match reply {
        ChatReply::Json { status, body } => {
            with_limits(status).content_type("application/json").body(body)
        }
        ChatReply::Stream { status, content_type, body } => {
            let body = body.map(|chunk| chunk.map_err(|e| std::io::Error::other(e.to_string())));
            with_limits(status)
                .content_type(content_type)
                .insert_header(("cache-control", "no-cache"))
                .insert_header(("x-accel-buffering", "no"))
                .streaming(body)
        }
    })
}

/// The models this gateway routes that the key may call (API key with `ai_gateway`; only
/// those its `allowed_models` match).
#[utoipa::path(get, path = "/api/v1/ai/models", tag = "ai", security(("api_key" = [])),
    responses((status = 200, body = ModelList), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        ServerErrors))]
pub async fn models(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ChatCompletion>,
) -> Result<HttpResponse, ApiError> {
    let data = state
        .gateway
        .models_for(&caller)
        .into_iter()
        .map(|id| ModelDto { id, object: "model".to_owned(), owned_by: "aigw".to_owned() })
        .collect();
    Ok(HttpResponse::Ok().json(ModelList { object: "list".to_owned(), data }))
}
