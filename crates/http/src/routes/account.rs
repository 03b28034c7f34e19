//! Self-service: `/api/v1/auth/sessions`, `PATCH /api/v1/auth/me`,
//! `POST /api/v1/auth/password`. Reading: an access token or a key with `read`; changing: an
//! access token only.

use super::attempts::failures_counted;
use crate::dto::account::{
    AuditListData, ChangePasswordRequest, EndedSessionData, SessionDto, SessionListData,
    UpdateMeRequest,
};
use crate::dto::{BodyErrors, Envelope, ErrorEnvelope, MeData, ServerErrors, TokenSetDto};
use crate::error::ApiError;
use crate::extract::{query_params, After, Authorized, JsonBody, PathId};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_service::PageRequest;

/// The caller's live sessions, newest first (access token, or API key with `read`).
#[utoipa::path(get, path = "/api/v1/auth/sessions", tag = "auth",
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<SessionListData>),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "API key without read", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn list_sessions(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ReadAccount>,
) -> Result<HttpResponse, ApiError> {
    let sessions = state.accounts.list_sessions(&caller).await?;
    let sessions = sessions.into_iter().map(SessionDto::from).collect();
    Ok(HttpResponse::Ok().json(Envelope::ok(SessionListData { sessions })))
}

/// End one of the caller's sessions (access token only); its access tokens are refused on
/// every node before this answers.
#[utoipa::path(delete, path = "/api/v1/auth/sessions/{id}", tag = "auth",
    params(("id" = String, Path, description = "Session id")),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<EndedSessionData>),
        (status = 400, description = "An id that contains NUL (U+0000)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        (status = 404, description = "No live session of the caller with this id", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn end_session(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    id: After<PathId>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    state.accounts.end_session(&caller, &id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(EndedSessionData { id, revoked: true })))
}

/// Change the caller's display name (access token only).
#[utoipa::path(patch, path = "/api/v1/auth/me", tag = "auth", request_body = UpdateMeRequest,
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<MeData>),
        (status = 400, body = ErrorEnvelope),
        BodyErrors,
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn update_me(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    body: After<JsonBody<UpdateMeRequest>>,
) -> Result<HttpResponse, ApiError> {
    let JsonBody(body) = body.into_inner()?;
    let user = state.accounts.update_name(&caller, &body.name).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(MeData { user: user.into() })))
}

/// Change the caller's password (access token only). Every other session of the user ends;
/// the answer is a fresh token set for the current session (its earlier refresh tokens stop
/// working).
#[utoipa::path(post, path = "/api/v1/auth/password", tag = "auth", request_body = ChangePasswordRequest,
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<TokenSetDto>),
        (status = 400, description = "new_password breaks the policy, or a field contains NUL", body = ErrorEnvelope),
        BodyErrors,
        (status = 401, description = "Wrong current password (the answer of a failed login)", body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn change_password(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ManageAccount>,
    body: After<JsonBody<ChangePasswordRequest>>,
) -> Result<HttpResponse, ApiError> {
    let JsonBody(body) = body.into_inner()?;
    let change = state.accounts.change_password(&caller, body.current_password, body.new_password);
    let set = failures_counted(&state, &req, change).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TokenSetDto::from(set))))
}

/// The caller's own audit trail (events concerning their account), newest first,
/// cursor-paged (access token, or API key with `read`).
#[utoipa::path(get, path = "/api/v1/audit", tag = "auth",
    params(
        ("action" = Option<String>, Query, description = "Only this action, e.g. `login_failed`"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Events per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<AuditListData>),
        (status = 400, description = "Unknown action, bad limit or cursor, an unknown parameter, or a parameter that contains NUL (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "API key without read", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn audit(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadAccount>,
) -> Result<HttpResponse, ApiError> {
    let mut params = query_params(&req, &["action", "limit", "cursor"])?;
    let page = PageRequest { limit: params.remove("limit"), cursor: params.remove("cursor") };
    let events = state.accounts.own_audit_events(&caller, params.remove("action"), &page).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(AuditListData::from(events))))
}
