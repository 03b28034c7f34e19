//! `/api/v1/usage` and `/api/v1/usage/requests`: the caller's own usage.

use crate::dto::usage::{UsageRequestsData, UsageSummaryData, UserBudgetData};
use crate::dto::{Envelope, ErrorEnvelope, ServerErrors};
use crate::error::ApiError;
use crate::extract::{query_params, Authorized};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_service::usage::UsageQuery;

/// The caller's usage over a range of UTC days, grouped by day, model, API key or endpoint,
/// optionally of one key or one endpoint (access token, or API key with `read`). Reads the
/// daily rollups.
#[utoipa::path(get, path = "/api/v1/usage", tag = "usage",
    params(
        ("from" = Option<String>, Query, format = Date, description = "First UTC day, YYYY-MM-DD (default: 29 days before `to`)"),
        ("to" = Option<String>, Query, format = Date, description = "Last UTC day, inclusive, YYYY-MM-DD (default: today); at most 366 days after `from`"),
        ("group_by" = Option<String>, Query, pattern = "^(day|model|api_key|endpoint|team)$", description = "`day` (default), `model`, `api_key` or `endpoint`; `team` (every team's usage) for platform admins (access token of role admin)"),
        ("api_key_id" = Option<String>, Query, description = "Only this API key's usage"),
        ("endpoint" = Option<String>, Query, pattern = "^(chat|embeddings|responses|messages)$", description = "Only the calls to this endpoint: `chat`, `embeddings`, `responses` or `messages`"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<UsageSummaryData>),
        (status = 400, description = "Bad date, range, group_by or endpoint, an api_key_id that contains NUL, or an unknown parameter (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, description = "API key without read", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn summary(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadUsage>,
) -> Result<HttpResponse, ApiError> {
    let mut params = query_params(&req, &["from", "to", "group_by", "api_key_id", "endpoint"])?;
    let query = UsageQuery {
        from: params.remove("from"),
        to: params.remove("to"),
        group_by: params.remove("group_by"),
        api_key_id: params.remove("api_key_id"),
        endpoint: params.remove("endpoint"),
    };
    let summary = state.usage.summary(&caller, query).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(UsageSummaryData::from(summary))))
}

/// The caller's usage records, newest first, cursor-paged (access token, or API key with
/// `read`). Per-request records are kept only with `usage.request_records = "database"`;
/// otherwise every page is empty (the sums are in `GET /usage`).
#[utoipa::path(get, path = "/api/v1/usage/requests", tag = "usage",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Records per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "A page of records, newest first; always empty unless the server keeps per-request records (`usage.request_records = \"database\"`)", body = Envelope<UsageRequestsData>),
        (status = 400, description = "Bad limit or cursor, an unknown parameter, or a parameter that contains NUL (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, description = "API key without read", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn requests(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadUsage>,
) -> Result<HttpResponse, ApiError> {
    let params = query_params(&req, &["limit", "cursor"])?;
    let page = state
        .usage
        .requests(
            &caller,
            params.get("limit").map(String::as_str),
            params.get("cursor").map(String::as_str),
        )
        .await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(UsageRequestsData::from(page))))
}

/// The caller's budget across all their keys (personal and scoped to a team; not team keys): the limit that applies (their own, set by an admin, else the platform's), its period, and what they spent in it. Access token, or API key with `read`.
#[utoipa::path(get, path = "/api/v1/usage/budget", tag = "usage",
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<UserBudgetData>),
        (status = 400, description = "A parameter (there are none; details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, description = "API key without read", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn budget(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadUsage>,
) -> Result<HttpResponse, ApiError> {
    query_params(&req, &[])?;
    let budget = state.accounts.user_budget(&caller).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(UserBudgetData::from(budget))))
}
