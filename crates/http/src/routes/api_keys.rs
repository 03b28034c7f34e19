//! `/api/v1/auth/api-keys` (seed §4, §5 rules 1-2).

use crate::dto::{
    ApiKeyDto, ApiKeyListData, BodyErrors, CreateApiKeyRequest, CreatedApiKeyDto, DeletedData,
    Envelope, ErrorEnvelope, ServerErrors,
};
use crate::error::ApiError;
use crate::extract::{After, Caller, JsonBody};
use crate::startup::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::Operation;
use aigw_service::{NewApiKey, Policy};

/// Create an API key (access token only). The full key is in this answer and never again.
#[utoipa::path(post, path = "/api/v1/auth/api-keys", tag = "api-keys", request_body = CreateApiKeyRequest,
    security(("access_token" = [])),
    responses(
        (status = 201, body = Envelope<CreatedApiKeyDto>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        ServerErrors))]
pub async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    Caller(caller): Caller,
    body: After<JsonBody<CreateApiKeyRequest>>,
) -> Result<HttpResponse, ApiError> {
    state.limits.by_caller(&req, Policy::Account, &caller).await?;
    caller.authorize(Operation::CreateApiKey)?;
    let JsonBody(body) = body.into_inner()?;
    let request =
        NewApiKey { name: body.name, permissions: body.permissions, expires_at: body.expires_at };
    let created = state.auth.create_api_key(&caller, request).await?;
    Ok(HttpResponse::Created().json(Envelope::ok(CreatedApiKeyDto::from(created))))
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
