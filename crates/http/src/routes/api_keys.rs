//! `/api/v1/auth/api-keys` (seed §4, §5 rules 1-2).

use crate::dto::{
    ApiKeyDto, ApiKeyListData, BodyErrors, CreateApiKeyRequest, CreatedApiKeyDto, DeletedData,
    Envelope, ErrorEnvelope, ServerErrors,
};
use crate::error::ApiError;
use crate::extract::{parse_json, After, Caller, RawJson};
use crate::idempotency;
use crate::startup::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::Operation;
use aigw_service::{CreatedApiKey, NewApiKey, Policy};

/// Create an API key (access token only). The full key is in this answer and never again.
#[utoipa::path(post, path = "/api/v1/auth/api-keys", tag = "api-keys", request_body = CreateApiKeyRequest,
    security(("access_token" = [])),
    params(("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255,
        description = "Optional (draft-ietf-httpapi-idempotency-key-header): a retry with the same key and body within 24 h answers the first result (with `Idempotent-Replayed: true`) and creates nothing new")),
    responses(
        (status = 201, body = Envelope<CreatedApiKeyDto>),
        (status = 409, description = "A request with this Idempotency-Key is still in progress (conflict)", body = ErrorEnvelope),
        (status = 422, description = "The Idempotency-Key was used for another request (idempotency_key_reused)", body = ErrorEnvelope),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        ServerErrors))]
pub async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    Caller(caller): Caller,
    body: After<RawJson>,
) -> Result<HttpResponse, ApiError> {
    state.limits.by_caller(&req, Policy::Account, &caller).await?;
    caller.authorize(Operation::CreateApiKey)?;
    let RawJson(raw) = body.into_inner()?;
    let body: CreateApiKeyRequest = parse_json(&raw)?;
    let request =
        NewApiKey { name: body.name, permissions: body.permissions, expires_at: body.expires_at };
    idempotency::run(&state, &req, &caller, &raw, StatusCode::CREATED, render_created, |rec| {
        state.auth.create_api_key_recorded(&caller, request, rec)
    })
    .await
}

/// The create answer's body: the envelope around the key object with its secret.
fn render_created(created: &CreatedApiKey) -> Vec<u8> {
    serde_json::to_vec(&Envelope::ok(CreatedApiKeyDto::from(created.clone()))).unwrap_or_default()
}

/// The caller's API keys, newest first (access token, or API key with `read`).
#[utoipa::path(get, path = "/api/v1/auth/api-keys", tag = "api-keys",
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<ApiKeyListData>),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        ServerErrors))]
pub async fn list(
    state: web::Data<AppState>,
    req: HttpRequest,
    Caller(caller): Caller,
) -> Result<HttpResponse, ApiError> {
    state.limits.by_caller(&req, Policy::Account, &caller).await?;
    let keys = state.auth.list_api_keys(&caller).await?;
    let usage = state.usage.usage_30d(caller.user_id(), None).await?;
    let api_keys = keys.into_iter().map(|k| ApiKeyDto::from(k).with_usage(&usage)).collect();
    Ok(HttpResponse::Ok().json(Envelope::ok(ApiKeyListData { api_keys })))
}

/// Revoke one of the caller's keys (access token, or API key with `write`); it is refused
/// from then on.
#[utoipa::path(post, path = "/api/v1/auth/api-keys/{id}/revoke", tag = "api-keys",
    params(("id" = String, Path, description = "API key id")),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "The key, with revoked_at set", body = Envelope<ApiKeyDto>),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, description = "No such key of the caller", body = ErrorEnvelope),
        ServerErrors))]
pub async fn revoke(
    state: web::Data<AppState>,
    req: HttpRequest,
    Caller(caller): Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    state.limits.by_caller(&req, Policy::Account, &caller).await?;
    let key = state.auth.revoke_api_key(&caller, &id).await?;
    let usage = state.usage.usage_30d(caller.user_id(), Some(&key.id)).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(ApiKeyDto::from(key).with_usage(&usage))))
}

/// Delete one of the caller's keys (access token, or API key with `write`).
#[utoipa::path(delete, path = "/api/v1/auth/api-keys/{id}", tag = "api-keys",
    params(("id" = String, Path, description = "API key id")),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<DeletedData>),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, description = "No such key of the caller", body = ErrorEnvelope),
        ServerErrors))]
pub async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    Caller(caller): Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    state.limits.by_caller(&req, Policy::Account, &caller).await?;
    let id = id.into_inner();
    state.auth.delete_api_key(&caller, &id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(DeletedData { id, deleted: true })))
}
