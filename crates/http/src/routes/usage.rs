//! `/api/v1/usage` and `/api/v1/usage/requests`: the caller's own usage (issue 8).

use crate::dto::{Envelope, ErrorEnvelope, ServerErrors};
use crate::dto_usage::{UsageRequestsData, UsageSummaryData};
use crate::error::ApiError;
use crate::extract::Authorized;
use crate::startup::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_service::usage::UsageQuery;
use std::collections::HashMap;

/// The query parameters of `req`, each at most once and each one of `allowed`.
pub(crate) fn query_params(
    req: &HttpRequest,
    allowed: &[&str],
) -> Result<HashMap<String, String>, ApiError> {
    let pairs = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map_err(|_| ApiError::invalid("query", "is not a valid query string"))?
        .into_inner();
    let mut params = HashMap::new();
    for (name, value) in pairs {
        if !allowed.contains(&name.as_str()) {
            let field: String = name.chars().take(64).collect();
            return Err(ApiError::invalid(
                field,
                format!("is not a parameter of this endpoint; allowed: {}", allowed.join(", ")),
            ));
        }
        if params.contains_key(&name) {
            return Err(ApiError::invalid(name, "is given more than once"));
        }
        params.insert(name, value);
    }
    Ok(params)
}

/// The caller's usage over a range of UTC days, grouped by day, model or API key (access
/// token, or API key with `read`). Reads the daily rollups.
#[utoipa::path(get, path = "/api/v1/usage", tag = "usage",
    params(
        ("from" = Option<String>, Query, format = Date, description = "First UTC day, YYYY-MM-DD (default: 29 days before `to`)"),
        ("to" = Option<String>, Query, format = Date, description = "Last UTC day, inclusive, YYYY-MM-DD (default: today); at most 366 days after `from`"),
        ("group_by" = Option<String>, Query, pattern = "^(day|model|api_key)$", description = "`day` (default), `model` or `api_key`"),
        ("api_key_id" = Option<String>, Query, description = "Only this API key's usage"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<UsageSummaryData>),
        (status = 400, description = "Bad date, range or group_by (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, description = "API key without read", body = ErrorEnvelope),
        ServerErrors))]
pub async fn summary(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadUsage>,
) -> Result<HttpResponse, ApiError> {
    let mut params = query_params(&req, &["from", "to", "group_by", "api_key_id"])?;
    let query = UsageQuery {
        from: params.remove("from"),
        to: params.remove("to"),
        group_by: params.remove("group_by"),
        api_key_id: params.remove("api_key_id"),
    };
    let summary = state.usage.summary(&caller, query).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(UsageSummaryData::from(summary))))
}

/// The caller's usage records, newest first, cursor-paged (access token, or API key with
/// `read`).
#[utoipa::path(get, path = "/api/v1/usage/requests", tag = "usage",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Records per page, 1 to 200 (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<UsageRequestsData>),
        (status = 400, description = "Bad limit or cursor", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, description = "API key without read", body = ErrorEnvelope),
        ServerErrors))]
pub async fn requests(
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
