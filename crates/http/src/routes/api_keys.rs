//! `/api/v1/auth/api-keys` (PATCH and rotate: docs/budgets.md).

use crate::dto::{
    ApiKeyDto, ApiKeyListData, BodyErrors, CreateApiKeyRequest, CreatedApiKeyDto, DeletedData,
    Envelope, ErrorEnvelope, Paged, RotateApiKeyRequest, ServerErrors, UpdateApiKeyRequest,
};
use crate::error::ApiError;
use crate::extract::{
    parse_json, query_params, After, Authorized, JsonBody, OptionalJsonBody, PathId, RawJson,
};
use crate::idempotency;
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::ApiKeyId;
use aigw_service::{ApiKeyView, CreatedApiKey, PageRequest};

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
        (status = 404, description = "`team_id` is not a team of the caller (resource: team)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::CreateApiKey>,
    body: After<RawJson>,
) -> Result<HttpResponse, ApiError> {
    let RawJson(raw) = body.into_inner()?;
    let body: CreateApiKeyRequest = parse_json(&raw)?;
    let request = body.into_new(true);
    idempotency::run(&state, &req, &caller, &raw, StatusCode::CREATED, render_created, |rec| {
        state.api_keys.create_api_key_recorded(&caller, request, rec)
    })
    .await
}

/// The create answer's body: the envelope around the key object with its secret.
fn render_created(created: &CreatedApiKey) -> Vec<u8> {
    serde_json::to_vec(&Envelope::ok(CreatedApiKeyDto::from(created.clone()))).unwrap_or_default()
}

/// The caller's API keys, newest first (access token, or API key with `read`): all of them,
/// or, with `limit` or `cursor`, one page and the `next_cursor` of the next.
#[utoipa::path(get, path = "/api/v1/auth/api-keys", tag = "api-keys",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Keys per page, 1 to 200 (default 50 when only `cursor` is given); without `limit` and `cursor` every key is answered"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<ApiKeyListData>),
        (status = 400, description = "Bad limit or cursor, an unknown parameter, or a parameter that contains NUL (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn list(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadAccount>,
) -> Result<HttpResponse, ApiError> {
    let mut params = query_params(&req, &["limit", "cursor"])?;
    let (keys, next_cursor) = if params.is_empty() {
        (state.api_keys.list_api_keys(&caller).await?, Paged::Whole)
    } else {
        let page = PageRequest { limit: params.remove("limit"), cursor: params.remove("cursor") };
        let page = state.api_keys.list_api_keys_page(&caller, &page).await?;
        (page.items, Paged::Page(page.next_cursor))
    };
    let usage = state.usage.usage_30d(caller.user_id(), None).await?;
    let spend = state.usage.period_spend(caller.user_id(), &keys).await?;
    let api_keys = keys
        .into_iter()
        .map(|k| ApiKeyDto::from(k).with_usage(&usage).with_spend(&spend))
        .collect();
    Ok(HttpResponse::Ok().json(Envelope::ok(ApiKeyListData { api_keys, next_cursor })))
}

/// The key object of one key, with its usage and its spend in the current period.
async fn key_object(
    state: &AppState,
    user_id: &str,
    key: ApiKeyView,
) -> Result<ApiKeyDto, ApiError> {
    let usage = state.usage.usage_30d(user_id, Some(&key.id)).await?;
    let spend = state.usage.period_spend(user_id, std::slice::from_ref(&key)).await?;
    Ok(ApiKeyDto::from(key).with_usage(&usage).with_spend(&spend))
}

/// Change one of the caller's keys (access token only): any of `name`, `permissions`,
/// `expires_at`, `allowed_models`, `max_budget_usd`, `budget_period`, `rpm_limit`,
/// `tpm_limit`, `metadata`; `null` clears a field, absent fields are kept. Every node applies
/// the change within 1 s.
#[utoipa::path(patch, path = "/api/v1/auth/api-keys/{id}", tag = "api-keys",
    request_body = UpdateApiKeyRequest,
    params(("id" = String, Path, description = "API key id")),
    security(("access_token" = [])),
    responses(
        (status = 200, description = "The key as it now is", body = Envelope<ApiKeyDto>),
        (status = 400, description = "An invalid or unknown field (named in details.field), or an id that contains NUL", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        (status = 404, description = "No such key of the caller", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn update(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::UpdateApiKey>,
    id: After<PathId<ApiKeyId>>,
    body: After<JsonBody<UpdateApiKeyRequest>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let JsonBody(body) = body.into_inner()?;
    let key = state.api_keys.update_api_key(&caller, &id, body.into()).await?;
    let key = key_object(&state, caller.user_id(), key).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(key)))
}

/// Rotate the secret of one of the caller's keys (access token only): the answer carries the
/// new full `key` (shown once) under the same `id`, limits and usage. The old secret keeps
/// working for `grace_period_secs` (default 86400), then answers 401; a secret replaced by
/// an earlier rotation stops at once.
#[utoipa::path(post, path = "/api/v1/auth/api-keys/{id}/rotate", tag = "api-keys",
    request_body(content = Option<RotateApiKeyRequest>, description = "Optional"),
    params(("id" = String, Path, description = "API key id")),
    security(("access_token" = [])),
    responses(
        (status = 200, description = "The key with its new secret", body = Envelope<CreatedApiKeyDto>),
        (status = 400, description = "grace_period_secs out of range, an unknown field, an id that contains NUL, or the key is revoked", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        (status = 404, description = "No such key of the caller", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn rotate(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::UpdateApiKey>,
    id: After<PathId<ApiKeyId>>,
    body: After<OptionalJsonBody<RotateApiKeyRequest>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let OptionalJsonBody(body) = body.into_inner()?;
    let rotated = state.api_keys.rotate_api_key(&caller, &id, body.grace_period_secs).await?;
    let api_key = key_object(&state, caller.user_id(), rotated.view).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(CreatedApiKeyDto { key: rotated.key, api_key })))
}

/// Revoke one of the caller's keys (access token, or API key with `write`); it is refused
/// from then on.
#[utoipa::path(post, path = "/api/v1/auth/api-keys/{id}/revoke", tag = "api-keys",
    params(("id" = String, Path, description = "API key id")),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "The key, with revoked_at set", body = Envelope<ApiKeyDto>),
        (status = 400, description = "An id that contains NUL (U+0000)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, description = "No such key of the caller", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn revoke(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ChangeApiKey>,
    id: After<PathId<ApiKeyId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let key = state.api_keys.revoke_api_key(&caller, &id).await?;
    let key = key_object(&state, caller.user_id(), key).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(key)))
}

/// Delete one of the caller's keys (access token, or API key with `write`).
#[utoipa::path(delete, path = "/api/v1/auth/api-keys/{id}", tag = "api-keys",
    params(("id" = String, Path, description = "API key id")),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<DeletedData>),
        (status = 400, description = "An id that contains NUL (U+0000)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, description = "No such key of the caller", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn delete(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ChangeApiKey>,
    id: After<PathId<ApiKeyId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    state.api_keys.delete_api_key(&caller, &id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(DeletedData { id: id.into(), deleted: true })))
}
