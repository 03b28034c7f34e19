//! `POST /api/v1/ai/responses` (OpenAI's Responses API), and the stored responses it
//! creates, passed through for the key that created them: `GET` and `DELETE
//! /api/v1/ai/responses/{id}`, `GET /api/v1/ai/responses/{id}/input_items`.

use crate::dto::{BodyErrors, GatewayErrors, ResponseRequest, ServerErrors, StoredResponseErrors};
use crate::error::ApiError;
use crate::extract::Authorized;
use crate::state::AppState;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::usage::Endpoint;
use aigw_service::{StoredCall, StoredRequest};

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
            headers(("x-aigw-deployment" = String, description = "The deployment that answered: `{provider}/{model}` (docs/routing.md)"), ("x-aigw-attempts" = u32, description = "Upstream calls made, retries and fallbacks included")),
            content((Object = "application/json"), (String = "text/event-stream"))),
        GatewayErrors, BodyErrors, ServerErrors))]
pub(crate) async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ChatCompletion>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    crate::routes::gateway::forward(&state, &req, &caller, payload, Endpoint::Responses, Vec::new())
        .await
}

/// A stored response (API key with `ai_gateway`; OpenAI's `responses.retrieve`): passed
/// through to the provider that created it (`GET {base_url}/responses/{id}`, the query string
/// unchanged, e.g. `include[]`) and its answer returned unchanged, for the API key that
/// created it only. Not metered. `stream=true` is 400: only background responses stream on
/// retrieval, and the gateway does not create those.
#[utoipa::path(get, path = "/api/v1/ai/responses/{id}", tag = "ai", security(("api_key" = [])),
    params(("id" = String, Path, description = "The response's id, as its provider gave it (`resp_…`)"),
        ("include[]" = Option<Vec<String>>, Query, description = "Passed on: extra output to include"),
        ("stream" = Option<bool>, Query, description = "`true` is refused (400)")),
    responses(
        (status = 200, description = "The provider's `response` object, unchanged", content((Object = "application/json"))),
        StoredResponseErrors, ServerErrors))]
pub(crate) async fn retrieve(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ChatCompletion>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    pass_stored(&state, &req, &caller, &id, StoredCall::Retrieve).await
}

/// Deletes a stored response (API key with `ai_gateway`; OpenAI's `responses.delete`):
/// passed through to its provider (`DELETE {base_url}/responses/{id}`), for the API key that
/// created it only; once the provider has deleted it, the gateway forgets it (a later
/// retrieval is 404).
#[utoipa::path(delete, path = "/api/v1/ai/responses/{id}", tag = "ai", security(("api_key" = [])),
    params(("id" = String, Path, description = "The response's id, as its provider gave it (`resp_…`)")),
    responses(
        (status = 200, description = "The provider's answer, unchanged (`{id, object: \"response\", deleted: true}`)", content((Object = "application/json"))),
        StoredResponseErrors, ServerErrors))]
pub(crate) async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ChatCompletion>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    pass_stored(&state, &req, &caller, &id, StoredCall::Delete).await
}

/// The input items of a stored response (API key with `ai_gateway`; OpenAI's
/// `responses.input_items.list`): passed through to its provider
/// (`GET {base_url}/responses/{id}/input_items`, the query string unchanged), for the API key
/// that created it only.
#[utoipa::path(get, path = "/api/v1/ai/responses/{id}/input_items", tag = "ai", security(("api_key" = [])),
    params(("id" = String, Path, description = "The response's id, as its provider gave it (`resp_…`)"),
        ("after" = Option<String>, Query, description = "Passed on: the item to list after"),
        ("limit" = Option<u32>, Query, description = "Passed on: items per page (1 to 100)"),
        ("order" = Option<String>, Query, description = "Passed on: `asc` or `desc`"),
        ("include[]" = Option<Vec<String>>, Query, description = "Passed on: extra fields to include")),
    responses(
        (status = 200, description = "The provider's list of input items, unchanged", content((Object = "application/json"))),
        StoredResponseErrors, ServerErrors))]
pub(crate) async fn input_items(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ChatCompletion>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    pass_stored(&state, &req, &caller, &id, StoredCall::InputItems).await
}

/// Hands `call` on response `id` to the gateway for `caller` (an API key with `ai_gateway`
/// whose address is verified where that is required) and answers the provider's answer.
async fn pass_stored(
    state: &AppState,
    req: &HttpRequest,
    caller: &aigw_service::Authorized<op::ChatCompletion>,
    id: &str,
    call: StoredCall,
) -> Result<HttpResponse, ApiError> {
    state.account_email.ensure_email_verified(caller).await?;
    let request_id = crate::request_id::current_request_id();
    let arrived = req
        .extensions()
        .get::<crate::middleware::access_log::Arrival>()
        .map_or_else(std::time::Instant::now, |a| a.0);
    let headers = crate::telemetry::upstream_headers(req, &request_id);
    let request =
        StoredRequest { response_id: id, query: req.query_string(), arrived, headers: &headers };
    let reply = state.gateway.stored_response(call, caller, request).await?;
    Ok(crate::routes::gateway::answer(reply, None))
}
