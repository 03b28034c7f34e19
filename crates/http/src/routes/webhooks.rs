//! `/api/v1/teams/{id}/webhook…`: a team's webhook for budget alerts, and its deliveries
//! (docs/alerts.md). Its owners and admins only; a non-member gets 404 for the team.

use crate::dto::teams::TeamDeletedData;
use crate::dto::webhooks::{
    CreatedWebhookDto, SetWebhookRequest, WebhookDeliveryListData, WebhookDto,
};
use crate::dto::{BodyErrors, Envelope, ErrorEnvelope, ServerErrors};
use crate::error::ApiError;
use crate::extract::{After, Authorized, JsonBody, PathId};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::TeamId;

/// Set the team's webhook (owners and admins; access token): budget alerts of the team, its members and its keys are POSTed there, signed with a new secret (Standard Webhooks), which is in this answer only. Setting it again replaces the URL and the secret.
#[utoipa::path(put, path = "/api/v1/teams/{id}/webhook", tag = "teams", request_body = SetWebhookRequest,
    params(("id" = String, Path, description = "Team id")),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<CreatedWebhookDto>),
        (status = 400, description = "A bad url (not https://, a user or password, an address that is not public) or id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn set(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    id: After<PathId<TeamId>>,
    body: After<JsonBody<SetWebhookRequest>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let JsonBody(body) = body.into_inner()?;
    let created = state.alerts.set_team_webhook(&caller, &id, &body.url).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(CreatedWebhookDto::from(created))))
}

/// The team's webhook, without its secret (owners and admins).
#[utoipa::path(get, path = "/api/v1/teams/{id}/webhook", tag = "teams",
    params(("id" = String, Path, description = "Team id")),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<WebhookDto>),
        (status = 400, description = "A bad id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "An API key without read, or without the team role (required: team_admin)", body = ErrorEnvelope),
        (status = 404, description = "No such team, the caller is not a member, or the team has no webhook (resource: webhook)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn get(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ReadAccount>,
    id: After<PathId<TeamId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let webhook = state.alerts.team_webhook(&caller, &id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(WebhookDto::from(webhook))))
}

/// Remove the team's webhook (owners and admins; access token); deliveries not yet made are dropped.
#[utoipa::path(delete, path = "/api/v1/teams/{id}/webhook", tag = "teams",
    params(("id" = String, Path, description = "Team id")),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<TeamDeletedData>),
        (status = 400, description = "A bad id (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token), or without the team role (required: team_admin)", body = ErrorEnvelope),
        (status = 404, description = "No such team, the caller is not a member, or the team has no webhook (resource: webhook)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn delete(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    id: After<PathId<TeamId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    state.alerts.delete_team_webhook(&caller, &id).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TeamDeletedData { id: id.into(), deleted: true })))
}

/// The team's webhook deliveries, newest first, with their status (owners and admins).
#[utoipa::path(get, path = "/api/v1/teams/{id}/webhook/deliveries", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Items per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<WebhookDeliveryListData>),
        (status = 400, description = "A bad limit, cursor or id, or an unknown parameter (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "An API key without read, or without the team role (required: team_admin)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn deliveries(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadAccount>,
    id: After<PathId<TeamId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let page = super::teams::page_request(&req)?;
    let deliveries = state.alerts.list_webhook_deliveries(&caller, &id, &page).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(WebhookDeliveryListData::from(deliveries))))
}
