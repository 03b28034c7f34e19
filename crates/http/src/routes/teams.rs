//! `/api/v1/teams/…`: teams, their members and invitations, and their team keys
//! (docs/teams.md). A non-member gets 404 for a team; a member without the role 403.

use crate::dto::teams::{
    AddMemberRequest, CreateTeamRequest, MemberAddedData, MemberDto, MemberListData,
    TeamApiKeyListData, TeamDeletedData, TeamDto, TeamInvitationDto, TeamInvitationListData,
    TeamListData, UpdateMemberRequest, UpdateTeamRequest,
};
use crate::dto::usage::UsageSummaryData;
use crate::dto::{
    ApiKeyDto, BodyErrors, CreateApiKeyRequest, CreatedApiKeyDto, Envelope, ErrorEnvelope,
    RotateApiKeyRequest, ServerErrors, UpdateApiKeyRequest,
};
use crate::error::ApiError;
use crate::extract::{
    query_params, After, Authorized, JsonBody, OptionalJsonBody, PathId, PathIds,
};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::{ApiKeyId, TeamId, UserId};
use aigw_service::teams::{MemberPatch, NewMember};
use aigw_service::usage::UsageQuery;
use aigw_service::PageRequest;

/// The paging parameters of a list request.
pub(super) fn page_request(req: &HttpRequest) -> Result<PageRequest, ApiError> {
    let mut params = query_params(req, &["limit", "cursor"])?;
    Ok(PageRequest { limit: params.remove("limit"), cursor: params.remove("cursor") })
}

/// Create a team (access token): the caller becomes its owner.
#[utoipa::path(post, path = "/api/v1/teams", tag = "teams", request_body = CreateTeamRequest,
    security(("access_token" = [])),
    responses(
        (status = 201, body = Envelope<TeamDto>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn create(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    body: After<JsonBody<CreateTeamRequest>>,
) -> Result<HttpResponse, ApiError> {
    let JsonBody(body) = body.into_inner()?;
    let team = state.teams.create_team(&caller, body.into_new()).await?;
    Ok(HttpResponse::Created().json(Envelope::ok(TeamDto::from(team))))
}

/// The caller's teams, newest first, cursor-paged.
#[utoipa::path(get, path = "/api/v1/teams", tag = "teams",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Items per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<TeamListData>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "An API key without `read`", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn list(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadAccount>,
) -> Result<HttpResponse, ApiError> {
    let page = page_request(&req)?;
    let teams = state.teams.list_teams(&caller, &page).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TeamListData::from(teams))))
}

/// One team (its members, platform admins).
#[utoipa::path(get, path = "/api/v1/teams/{id}", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<TeamDto>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "An API key without `read`", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn get(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ReadAccount>,
    id: After<PathId<TeamId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let team = state.teams.get_team(&caller, &id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TeamDto::from(team))))
}

/// Change a team's name or policy (its owners and admins); every node applies it before this answers.
#[utoipa::path(patch, path = "/api/v1/teams/{id}", tag = "teams", request_body = UpdateTeamRequest,
    params(
        ("id" = String, Path, description = "Team id"),
    ),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<TeamDto>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn update(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    id: After<PathId<TeamId>>,
    body: After<JsonBody<UpdateTeamRequest>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let JsonBody(body) = body.into_inner()?;
    let team = state.teams.update_team(&caller, &id, body.into()).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TeamDto::from(team))))
}

/// Delete a team (its owners, platform admins): every key scoped to it is revoked on every node; its usage history stays.
#[utoipa::path(delete, path = "/api/v1/teams/{id}", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
    ),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<TeamDeletedData>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn delete(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    id: After<PathId<TeamId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    state.teams.delete_team(&caller, &id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TeamDeletedData { id: id.into(), deleted: true })))
}

/// A team's members, cursor-paged.
#[utoipa::path(get, path = "/api/v1/teams/{id}/members", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Items per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<MemberListData>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "An API key without `read`", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn list_members(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadAccount>,
    id: After<PathId<TeamId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let page = page_request(&req)?;
    let members = state.teams.list_team_members(&caller, &id, &page).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(MemberListData::from(members))))
}

/// Add a member by e-mail (owners and admins): an account joins at once (`status: joined`); an address without one is invited, by e-mail when a mailer is configured, and joins once an account has the address verified, whatever `auth.email_verification` says (`status: invited`).
#[utoipa::path(post, path = "/api/v1/teams/{id}/members", tag = "teams", request_body = AddMemberRequest,
    params(
        ("id" = String, Path, description = "Team id"),
    ),
    security(("access_token" = [])),
    responses(
        (status = 201, body = Envelope<MemberAddedData>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn add_member(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    id: After<PathId<TeamId>>,
    body: After<JsonBody<AddMemberRequest>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let JsonBody(body) = body.into_inner()?;
    let request = NewMember { email: body.email, role: body.role };
    let added = state.teams.add_team_member(&caller, &id, request).await?;
    Ok(HttpResponse::Created().json(Envelope::ok(MemberAddedData::from(added))))
}

/// Change a member's role or own budget (owners and admins; owners for an owner); the last owner stays one.
#[utoipa::path(patch, path = "/api/v1/teams/{id}/members/{user_id}", tag = "teams", request_body = UpdateMemberRequest,
    params(
        ("id" = String, Path, description = "Team id"),
        ("user_id" = String, Path, description = "The member's user id"),
    ),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<MemberDto>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn update_member(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    ids: After<PathIds<TeamId, UserId>>,
    body: After<JsonBody<UpdateMemberRequest>>,
) -> Result<HttpResponse, ApiError> {
    let PathIds(id, member) = ids.into_inner()?;
    let JsonBody(body) = body.into_inner()?;
    let patch = MemberPatch { role: body.role, budget_usd: body.budget_usd };
    let member = state.teams.update_team_member(&caller, &id, &member, patch).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(MemberDto::from(member))))
}

/// Remove a member, or leave (one's own user id). Their keys scoped to the team stop on every node before this answers; the last owner cannot leave.
#[utoipa::path(delete, path = "/api/v1/teams/{id}/members/{user_id}", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
        ("user_id" = String, Path, description = "The member's user id"),
    ),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<TeamDeletedData>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn remove_member(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    ids: After<PathIds<TeamId, UserId>>,
) -> Result<HttpResponse, ApiError> {
    let PathIds(id, member) = ids.into_inner()?;
    state.teams.remove_team_member(&caller, &id, &member).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TeamDeletedData { id: member.into(), deleted: true })))
}

/// A team's open invitations, newest first (owners and admins).
#[utoipa::path(get, path = "/api/v1/teams/{id}/invitations", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Items per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<TeamInvitationListData>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn list_invitations(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadAccount>,
    id: After<PathId<TeamId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let page = page_request(&req)?;
    let invitations = state.teams.list_team_invitations(&caller, &id, &page).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TeamInvitationListData::from(invitations))))
}

/// Revoke an open invitation (owners and admins).
#[utoipa::path(delete, path = "/api/v1/teams/{id}/invitations/{invitation_id}", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
        ("invitation_id" = String, Path, description = "Invitation id"),
    ),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<TeamDeletedData>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn revoke_invitation(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    ids: After<PathIds<TeamId, String>>,
) -> Result<HttpResponse, ApiError> {
    let PathIds(id, invitation) = ids.into_inner()?;
    state.teams.revoke_team_invitation(&caller, &id, &invitation).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TeamDeletedData { id: invitation, deleted: true })))
}

/// Re-send an open invitation (owners and admins): it is e-mailed again (when a mailer is configured) and stays open for `auth.team_invitation_ttl_days` more from now, expired or not.
#[utoipa::path(post, path = "/api/v1/teams/{id}/invitations/{invitation_id}/resend", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
        ("invitation_id" = String, Path, description = "Invitation id"),
    ),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<TeamInvitationDto>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team, the caller is not a member, or no such open invitation of the team", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn resend_invitation(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    ids: After<PathIds<TeamId, String>>,
) -> Result<HttpResponse, ApiError> {
    let PathIds(id, invitation) = ids.into_inner()?;
    let resent = state.teams.resend_team_invitation(&caller, &id, &invitation).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TeamInvitationDto::from(resent))))
}

/// Create a team key (owners and admins; access token): it belongs to the team, counts against the key and the team, and keeps working when its creator leaves. The full key is in this answer and never again.
#[utoipa::path(post, path = "/api/v1/teams/{id}/api-keys", tag = "teams", request_body = CreateApiKeyRequest,
    params(
        ("id" = String, Path, description = "Team id"),
    ),
    security(("access_token" = [])),
    responses(
        (status = 201, body = Envelope<CreatedApiKeyDto>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn create_key(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::CreateApiKey>,
    id: After<PathId<TeamId>>,
    body: After<JsonBody<CreateApiKeyRequest>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let JsonBody(body) = body.into_inner()?;
    let request = body.into_new(false);
    let created = state.teams.create_team_api_key(&caller, &id, request).await?;
    Ok(HttpResponse::Created().json(Envelope::ok(CreatedApiKeyDto::from(created))))
}

/// Create a key for a member (owners and admins; access token): the key is the member's and scoped to the team, so its calls count against the key, the member's budget in the team, the team and the member's own budget; the member finds it among their keys and is told by e-mail. The full key is in this answer and never again (pass it on to the member).
#[utoipa::path(post, path = "/api/v1/teams/{id}/members/{user_id}/api-keys", tag = "teams", request_body = CreateApiKeyRequest,
    params(
        ("id" = String, Path, description = "Team id"),
        ("user_id" = String, Path, description = "The member's user id"),
    ),
    security(("access_token" = [])),
    responses(
        (status = 201, body = Envelope<CreatedApiKeyDto>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin)", body = ErrorEnvelope),
        (status = 404, description = "No such team, the caller is not a member (resource: team), or the user is not a member (resource: team_member)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn create_member_key(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::CreateApiKey>,
    ids: After<PathIds<TeamId, UserId>>,
    body: After<JsonBody<CreateApiKeyRequest>>,
) -> Result<HttpResponse, ApiError> {
    let PathIds(id, member) = ids.into_inner()?;
    let JsonBody(body) = body.into_inner()?;
    let request = body.into_new(false);
    let created = state.teams.create_member_api_key(&caller, &id, &member, request).await?;
    Ok(HttpResponse::Created().json(Envelope::ok(CreatedApiKeyDto::from(created))))
}

/// A team's team keys, newest first (owners and admins).
#[utoipa::path(get, path = "/api/v1/teams/{id}/api-keys", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Items per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<TeamApiKeyListData>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn list_keys(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadAccount>,
    id: After<PathId<TeamId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let page = page_request(&req)?;
    let keys = state.teams.list_team_api_keys(&caller, &id, &page).await?;
    let api_keys = keys.items.into_iter().map(ApiKeyDto::from).collect();
    let data = TeamApiKeyListData { api_keys, next_cursor: keys.next_cursor };
    Ok(HttpResponse::Ok().json(Envelope::ok(data)))
}

/// Change a team key, as a key of one's own (owners and admins).
#[utoipa::path(patch, path = "/api/v1/teams/{id}/api-keys/{key_id}", tag = "teams", request_body = UpdateApiKeyRequest,
    params(
        ("id" = String, Path, description = "Team id"),
        ("key_id" = String, Path, description = "API key id"),
    ),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<ApiKeyDto>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team or team key", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn update_key(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::UpdateApiKey>,
    ids: After<PathIds<TeamId, ApiKeyId>>,
    body: After<JsonBody<UpdateApiKeyRequest>>,
) -> Result<HttpResponse, ApiError> {
    let PathIds(id, key_id) = ids.into_inner()?;
    let JsonBody(body) = body.into_inner()?;
    let key = state.teams.update_team_api_key(&caller, &id, &key_id, body.into()).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(ApiKeyDto::from(key))))
}

/// Rotate a team key's secret, as a key of one's own (owners and admins).
#[utoipa::path(post, path = "/api/v1/teams/{id}/api-keys/{key_id}/rotate", tag = "teams", request_body = Option<RotateApiKeyRequest>,
    params(
        ("id" = String, Path, description = "Team id"),
        ("key_id" = String, Path, description = "API key id"),
    ),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<CreatedApiKeyDto>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin or team_owner)", body = ErrorEnvelope),
        (status = 404, description = "No such team or team key", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn rotate_key(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::UpdateApiKey>,
    ids: After<PathIds<TeamId, ApiKeyId>>,
    body: After<OptionalJsonBody<RotateApiKeyRequest>>,
) -> Result<HttpResponse, ApiError> {
    let PathIds(id, key_id) = ids.into_inner()?;
    let OptionalJsonBody(body) = body.into_inner()?;
    let rotated =
        state.teams.rotate_team_api_key(&caller, &id, &key_id, body.grace_period_secs).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(CreatedApiKeyDto::from(rotated))))
}

/// Revoke a team key on every node (owners and admins).
#[utoipa::path(post, path = "/api/v1/teams/{id}/api-keys/{key_id}/revoke", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
        ("key_id" = String, Path, description = "API key id"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<ApiKeyDto>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, body = ErrorEnvelope),
        (status = 404, description = "No such team or team key", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn revoke_key(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ChangeApiKey>,
    ids: After<PathIds<TeamId, ApiKeyId>>,
) -> Result<HttpResponse, ApiError> {
    let PathIds(id, key_id) = ids.into_inner()?;
    let key = state.teams.revoke_team_api_key(&caller, &id, &key_id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(ApiKeyDto::from(key))))
}

/// Delete a team key (owners and admins).
#[utoipa::path(delete, path = "/api/v1/teams/{id}/api-keys/{key_id}", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
        ("key_id" = String, Path, description = "API key id"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<TeamDeletedData>),
        (status = 400, description = "An invalid field, parameter or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, body = ErrorEnvelope),
        (status = 404, description = "No such team or team key", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn delete_key(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ChangeApiKey>,
    ids: After<PathIds<TeamId, ApiKeyId>>,
) -> Result<HttpResponse, ApiError> {
    let PathIds(id, key_id) = ids.into_inner()?;
    state.teams.delete_team_api_key(&caller, &id, &key_id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TeamDeletedData { id: key_id.into(), deleted: true })))
}

/// A team's usage over a range of UTC days, grouped by `day` (default), `model`, `member`,
/// `api_key` or `endpoint`, optionally of one endpoint (owners and admins). Reads the daily
/// rollups; deleted keys keep their usage.
#[utoipa::path(get, path = "/api/v1/teams/{id}/usage", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
        ("from" = Option<String>, Query, format = Date, description = "First UTC day, YYYY-MM-DD (default: 29 days before `to`)"),
        ("to" = Option<String>, Query, format = Date, description = "Last UTC day, inclusive, YYYY-MM-DD (default: today); at most 366 days after `from`"),
        ("group_by" = Option<String>, Query, pattern = "^(day|model|member|api_key|endpoint)$", description = "`day` (default), `model`, `member`, `api_key` or `endpoint`"),
        ("endpoint" = Option<String>, Query, pattern = "^(chat|embeddings|responses|messages)$", description = "Only the calls to this endpoint: `chat`, `embeddings`, `responses` or `messages`"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<UsageSummaryData>),
        (status = 400, description = "Bad date, range, group_by, endpoint or id, or an unknown parameter (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "An API key without `read`, or not a team owner or admin (required: team_admin)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn usage(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadUsage>,
    id: After<PathId<TeamId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let mut params = query_params(&req, &["from", "to", "group_by", "endpoint"])?;
    let query = UsageQuery {
        from: params.remove("from"),
        to: params.remove("to"),
        group_by: params.remove("group_by"),
        api_key_id: None,
        endpoint: params.remove("endpoint"),
    };
    let summary = state.teams.team_usage(&caller, &id, query).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(UsageSummaryData::from(summary))))
}
