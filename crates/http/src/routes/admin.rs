//! `/api/v1/admin/…`: every user and every API key, for administrators (role
//! `admin` with an access token, or an API key with `admin` whose owner is an admin).

use crate::dto::account::AuditListData;
use crate::dto::admin::{
    AdminApiKeyDto, AdminApiKeyListData, AdminUserDto, CreateInvitationRequest, InvitationData,
    InvitationListData, UpdateUserRequest, UserListData,
};
use crate::dto::{BodyErrors, DeletedData, Envelope, ErrorEnvelope, ServerErrors};
use crate::error::ApiError;
use crate::extract::{query_params, AdminCaller, After, JsonBody, PathId};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::{ApiKeyId, UserId};
use aigw_service::admin::InvitationFilter;
use aigw_service::{PageRequest, UserUpdate};
use std::collections::HashMap;

fn page_request(params: &mut HashMap<String, String>) -> PageRequest {
    PageRequest { limit: params.remove("limit"), cursor: params.remove("cursor") }
}

/// Every user, newest first, cursor-paged; `email` filters by prefix.
#[utoipa::path(get, path = "/api/v1/admin/users", tag = "admin",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Users per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ("email" = Option<String>, Query, description = "Only users whose e-mail starts with this (normalised as addresses are: NFKC, lower case)"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<UserListData>),
        (status = 400, description = "Bad limit or cursor, an unknown parameter, or a parameter that contains NUL (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Not an admin (required: admin)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn list_users(
    state: web::Data<AppState>,
    req: HttpRequest,
    AdminCaller(admin): AdminCaller,
) -> Result<HttpResponse, ApiError> {
    let mut params = query_params(&req, &["limit", "cursor", "email"])?;
    let page = page_request(&mut params);
    let users = state.admin.admin_list_users(&admin, params.remove("email"), &page).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(UserListData::from(users))))
}

/// One user.
#[utoipa::path(get, path = "/api/v1/admin/users/{id}", tag = "admin",
    params(("id" = String, Path, description = "User id")),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<AdminUserDto>),
        (status = 400, description = "An id that contains NUL (U+0000)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Not an admin (required: admin)", body = ErrorEnvelope),
        (status = 404, description = "No such user", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn get_user(
    state: web::Data<AppState>,
    AdminCaller(admin): AdminCaller,
    id: After<PathId<UserId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let user = state.admin.admin_get_user(&admin, &id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(AdminUserDto::from(user))))
}

/// Change a user's role or own budget, or disable or re-enable the account. Disabling ends every session of
/// the user and makes their API keys answer 401 (`the account is disabled`) on every node
/// before this answers; re-enabling restores the keys, not the sessions.
#[utoipa::path(patch, path = "/api/v1/admin/users/{id}", tag = "admin",
    params(("id" = String, Path, description = "User id")),
    request_body = UpdateUserRequest,
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "The user as changed", body = Envelope<AdminUserDto>),
        (status = 400, description = "Bad field or id, no field, or an admin demoting or disabling themselves", body = ErrorEnvelope),
        BodyErrors,
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Not an admin (required: admin)", body = ErrorEnvelope),
        (status = 404, description = "No such user", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn update_user(
    state: web::Data<AppState>,
    AdminCaller(admin): AdminCaller,
    id: After<PathId<UserId>>,
    body: After<JsonBody<UpdateUserRequest>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let JsonBody(body) = body.into_inner()?;
    let update = UserUpdate {
        role: body.role.map(Into::into),
        disabled: body.disabled,
        budget_usd: body.budget_usd,
    };
    let user = state.admin.admin_update_user(&admin, &id, update).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(AdminUserDto::from(user))))
}

/// Every user's API keys (one user's with `user_id`; those whose visible prefix starts with
/// `key_prefix`), newest first, cursor-paged.
#[utoipa::path(get, path = "/api/v1/admin/api-keys", tag = "admin",
    params(
        ("user_id" = Option<String>, Query, description = "Only this user's keys"),
        ("key_prefix" = Option<String>, Query, min_length = 1, max_length = 12, pattern = "^[A-Za-z0-9_]{1,12}$", description = "Only keys whose `key_prefix` (their first 12 characters, e.g. `aigw_AbC1234`) starts with this; case-sensitive, 1 to 12 letters, digits or `_`"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Keys per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<AdminApiKeyListData>),
        (status = 400, description = "Bad key_prefix, limit or cursor, an unknown parameter, or a parameter that contains NUL (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Not an admin (required: admin)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn list_api_keys(
    state: web::Data<AppState>,
    req: HttpRequest,
    AdminCaller(admin): AdminCaller,
) -> Result<HttpResponse, ApiError> {
    let mut params = query_params(&req, &["user_id", "key_prefix", "limit", "cursor"])?;
    let page = page_request(&mut params);
    let (user_id, key_prefix) = (params.remove("user_id"), params.remove("key_prefix"));
    let keys = state.admin.admin_list_api_keys(&admin, user_id, key_prefix, &page).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(AdminApiKeyListData::from(keys))))
}

/// Revoke any user's API key; it is refused on every node before this answers.
#[utoipa::path(post, path = "/api/v1/admin/api-keys/{id}/revoke", tag = "admin",
    params(("id" = String, Path, description = "API key id")),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "The key, with revoked_at set", body = Envelope<AdminApiKeyDto>),
        (status = 400, description = "An id that contains NUL (U+0000)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Not an admin (required: admin)", body = ErrorEnvelope),
        (status = 404, description = "No such key", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn revoke_api_key(
    state: web::Data<AppState>,
    AdminCaller(admin): AdminCaller,
    id: After<PathId<ApiKeyId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let key = state.admin.admin_revoke_api_key(&admin, &id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(AdminApiKeyDto::from(key))))
}

/// Every audit event (one user's with `user_id`), newest first, cursor-paged.
#[utoipa::path(get, path = "/api/v1/admin/audit", tag = "admin",
    params(
        ("user_id" = Option<String>, Query, description = "Only events concerning this user"),
        ("action" = Option<String>, Query, description = "Only this action, e.g. `user_disabled`"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Events per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<AuditListData>),
        (status = 400, description = "Unknown action, bad limit or cursor, an unknown parameter, or a parameter that contains NUL (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Not an admin (required: admin)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn audit(
    state: web::Data<AppState>,
    req: HttpRequest,
    AdminCaller(admin): AdminCaller,
) -> Result<HttpResponse, ApiError> {
    let mut params = query_params(&req, &["user_id", "action", "limit", "cursor"])?;
    let page = page_request(&mut params);
    let (user_id, action) = (params.remove("user_id"), params.remove("action"));
    let events = state.admin.admin_audit_events(&admin, user_id, action, &page).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(AuditListData::from(events))))
}

/// Create a single-use invitation to register (for `auth.registration = "invite"`). The token
/// is in this answer and never again; only its digest is stored.
#[utoipa::path(post, path = "/api/v1/admin/invitations", tag = "admin",
    request_body = CreateInvitationRequest,
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 201, body = Envelope<InvitationData>),
        (status = 400, description = "Bad email or expires_at", body = ErrorEnvelope),
        BodyErrors,
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Not an admin (required: admin)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn create_invitation(
    state: web::Data<AppState>,
    AdminCaller(admin): AdminCaller,
    body: After<JsonBody<CreateInvitationRequest>>,
) -> Result<HttpResponse, ApiError> {
    let JsonBody(body) = body.into_inner()?;
    let created = state
        .admin
        .admin_create_invitation(&admin, &body.email, body.expires_at.as_deref())
        .await?;
    Ok(HttpResponse::Created().json(Envelope::ok(InvitationData::from(created))))
}

/// The invitations to register, newest first, cursor-paged, each with its state: the open
/// ones (unused, unrevoked, unexpired) by default, every one with `state=all`.
#[utoipa::path(get, path = "/api/v1/admin/invitations", tag = "admin",
    params(
        ("state" = Option<String>, Query, pattern = "^(open|all)$", description = "`open` (default): those that can still be used; `all`: every one, used, revoked and expired included"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Invitations per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<InvitationListData>),
        (status = 400, description = "Bad state, limit or cursor, an unknown parameter, or a parameter that contains NUL (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Not an admin (required: admin)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn list_invitations(
    state: web::Data<AppState>,
    req: HttpRequest,
    AdminCaller(admin): AdminCaller,
) -> Result<HttpResponse, ApiError> {
    let mut params = query_params(&req, &["state", "limit", "cursor"])?;
    let filter = match params.remove("state") {
        Some(raw) => InvitationFilter::parse(&raw)?,
        None => InvitationFilter::Open,
    };
    let page = page_request(&mut params);
    let invitations = state.admin.admin_list_invitations(&admin, filter, &page).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(InvitationListData::from(invitations))))
}

/// Send an invitation to register again: a new token (the old link stops working), valid
/// for 7 days from now, e-mailed when a mailer is configured. An expired invitation opens
/// again; a used or revoked one cannot. The new token is in this answer and never again.
#[utoipa::path(post, path = "/api/v1/admin/invitations/{id}/resend", tag = "admin",
    params(("id" = String, Path, description = "Invitation id")),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<InvitationData>),
        (status = 400, description = "An id that contains NUL (U+0000)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Not an admin (required: admin)", body = ErrorEnvelope),
        (status = 404, description = "No unused, unrevoked invitation to register with this id", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn resend_invitation(
    state: web::Data<AppState>,
    AdminCaller(admin): AdminCaller,
    id: After<PathId>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let renewed = state.admin.admin_resend_invitation(&admin, &id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(InvitationData::from(renewed))))
}

/// Revoke an open invitation to register: it can no longer be used.
#[utoipa::path(delete, path = "/api/v1/admin/invitations/{id}", tag = "admin",
    params(("id" = String, Path, description = "Invitation id")),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<DeletedData>),
        (status = 400, description = "An id that contains NUL (U+0000)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Not an admin (required: admin)", body = ErrorEnvelope),
        (status = 404, description = "No open invitation with this id", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn revoke_invitation(
    state: web::Data<AppState>,
    AdminCaller(admin): AdminCaller,
    id: After<PathId>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    state.admin.admin_revoke_invitation(&admin, &id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(DeletedData { id, deleted: true })))
}
